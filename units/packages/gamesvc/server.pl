#!/usr/bin/perl
# gamesvr: a tiny HTTP/1.0 server standing in for a classic game server.
# Uses only perl-base modules, so it runs on a Debian host with Essential packages only.
#
#   perl server.pl --port N [--address A] [--pidfile PATH]
#
# Routes: GET /health (and /check) -> 200 "ok\n", or 503 "unhealthy\n" while ./unhealthy exists;
#         GET / -> 200 with instance info and counters; anything else -> 404.
# Signals: HUP -> log "reloaded", bump the reload counter; TERM/INT -> log, remove pidfile, exit 0.
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use POSIX ();

$0 = 'gamesvr';    # Linux: also sets /proc/self/comm (prctl PR_SET_NAME)
$| = 1;

my $NAME = 'gamesvr';
my ($port, $address, $pidfile) = (undef, '0.0.0.0', undef);

sub usage {
    print STDERR "usage: server.pl --port N [--address A] [--pidfile PATH]\n";
    exit 2;
}

while (@ARGV) {
    my $arg = shift @ARGV;
    my $val;
    if ($arg =~ /^(--[\w-]+)=(.*)$/s) { ($arg, $val) = ($1, $2) }
    my $need = sub { defined $val ? $val : (@ARGV ? shift @ARGV : usage()) };
    if    ($arg eq '--port' || $arg eq '--service-port') { $port    = $need->() }
    elsif ($arg eq '--address')                          { $address = $need->() }
    elsif ($arg eq '--pidfile')                          { $pidfile = $need->() }
    elsif ($arg eq '--help' || $arg eq '-h')             { usage() }
    else { print STDERR "server.pl: unknown argument: $arg\n"; usage() }
}
usage() unless defined $port && $port =~ /^\d+$/ && $port > 0 && $port < 65536;
$pidfile = undef if defined $pidfile && $pidfile eq '';

sub logmsg {
    my $ts = POSIX::strftime('%Y-%m-%dT%H:%M:%SZ', gmtime);
    print "$ts $NAME\[$$\]: @_\n";
}

my $started  = time;
my $requests = 0;
my $reloads  = 0;
my $stop     = 0;
my $wrote_pidfile = 0;

$SIG{PIPE} = 'IGNORE';
$SIG{HUP}  = sub { $reloads++; logmsg("reloaded (reload #$reloads)") };
$SIG{TERM} = sub { $stop = 'TERM' };
$SIG{INT}  = sub { $stop = 'INT' };

# Detach from the controlling terminal / session if start.sh could not (setsid missing).
POSIX::setsid();

my $listener = IO::Socket::INET->new(
    LocalAddr => $address,
    LocalPort => $port,
    Proto     => 'tcp',
    Listen    => 64,
    ReuseAddr => 1,
) or do {
    logmsg("cannot listen on $address:$port: $@");
    exit 1;
};
logmsg("listening on $address:$port");

# Like a classic forking game server, the pidfile shows up a little after startup.
select(undef, undef, undef, 0.3);
if (defined $pidfile) {
    my $tmp = "$pidfile.tmp.$$";
    if (open(my $fh, '>', $tmp)) {
        print $fh "$$\n";
        if (close($fh) && rename($tmp, $pidfile)) {
            $wrote_pidfile = 1;
            logmsg("wrote pidfile $pidfile");
        } else {
            logmsg("cannot write pidfile $pidfile: $!");
            unlink $tmp;
        }
    } else {
        logmsg("cannot write pidfile $tmp: $!");
    }
}

sub shutdown_and_exit {
    logmsg("got SIG$stop, exiting");
    if ($wrote_pidfile && open(my $fh, '<', $pidfile)) {
        my $line = <$fh>;
        close $fh;
        unlink $pidfile if defined $line && $line =~ /^\s*$$\s*$/;
    }
    exit 0;
}

# Read the request head with a deadline, so a client that connects and sends
# nothing cannot hang the (single-threaded) server.
sub read_head {
    my ($sock) = @_;
    my $sel = IO::Select->new($sock);
    my $deadline = time + 2;
    my $buf = '';
    while ($buf !~ /\r?\n\r?\n/ && length($buf) < 16384) {
        my $left = $deadline - time;
        return undef if $left <= 0;
        my @ready = $sel->can_read($left);
        return undef if $stop;
        next unless @ready;    # timeout or EINTR: re-check the deadline
        my $n = sysread($sock, $buf, 4096, length $buf);
        next if !defined $n && $!{EINTR};
        last unless $n;        # EOF or error: use what we have
    }
    return $buf;
}

sub respond {
    my ($sock, $code, $body, $head_only) = @_;
    my %reason = (200 => 'OK', 400 => 'Bad Request', 404 => 'Not Found', 503 => 'Service Unavailable');
    my $msg = "HTTP/1.0 $code $reason{$code}\r\n"
        . "Server: $NAME\r\n"
        . "Content-Type: text/plain\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n"
        . ($head_only ? '' : $body);
    my $off = 0;
    while ($off < length $msg) {
        my $n = syswrite($sock, $msg, length($msg) - $off, $off);
        if (!defined $n) { next if $!{EINTR}; last }
        $off += $n;
    }
}

sub info_body {
    my $body = "$NAME pid=$$ port=$port\n";
    for my $var (qw(STEWARD_INSTANCE namespace processname instanceid)) {
        $body .= "$var=$ENV{$var}\n" if defined $ENV{$var} && $ENV{$var} ne '';
    }
    $body .= "requests=$requests\n";
    $body .= "reloads=$reloads\n";
    $body .= 'uptime=' . (time - $started) . "s\n";
    return $body;
}

sub handle {
    my ($client) = @_;
    my $peer = $client->peerhost // '?';
    my $head = read_head($client);
    if (!defined $head || $head eq '') {
        logmsg("$peer timed out or sent nothing") unless $stop;
        return;
    }
    $requests++;
    my ($line) = split /\r?\n/, $head, 2;
    my ($method, $target) = ($line // '') =~ m{^([A-Z]+)\s+(\S+)(?:\s+HTTP/\d\.\d)?\s*$};
    my ($code, $body);
    if (!defined $method) {
        ($code, $body) = (400, "bad request\n");
        $method = $target = '-';
    } else {
        (my $path = $target) =~ s/\?.*//s;
        if (($method eq 'GET' || $method eq 'HEAD') && ($path eq '/health' || $path eq '/check')) {
            ($code, $body) = -e './unhealthy' ? (503, "unhealthy\n") : (200, "ok\n");
        } elsif (($method eq 'GET' || $method eq 'HEAD') && $path eq '/') {
            ($code, $body) = (200, info_body());
        } else {
            ($code, $body) = (404, "not found\n");
        }
    }
    respond($client, $code, $body, $method eq 'HEAD');
    logmsg("$peer \"$method $target\" $code");
}

while (1) {
    shutdown_and_exit() if $stop;
    my $client = $listener->accept;
    if (!$client) {
        next if $!{EINTR} || $stop;
        logmsg("accept failed: $!");
        select(undef, undef, undef, 0.1);
        next;
    }
    handle($client);
    close $client;
}
