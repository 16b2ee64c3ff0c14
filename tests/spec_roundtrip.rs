//! Round-trip properties of the spec model: any model survives JSON → model → JSON and
//! TOML ↔ JSON unchanged, and decoding what the model writes reports no mistake.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use steward::spec::model::*;
use steward::spec::{self, Format};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}",
        "\\PC{0,16}",
        Just(String::new()),
        Just("${work_base_dir}/${namespace}.${processname}.${instanceid}".to_string()),
    ]
}

fn seconds() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..100, 0u64..=i64::MAX as u64]
}

fn number_text() -> impl Strategy<Value = NumberText> {
    prop_oneof!["-1", "[0-9]{1,4}(\\.[0-9]{1,2})?", "\\PC{0,6}"].prop_map(NumberText)
}

fn port() -> impl Strategy<Value = Port> {
    (any::<i64>(), text(), prop_oneof![Just(Protocol::Tcp), Just(Protocol::Udp), Just(Protocol::Http)])
        .prop_map(|(host_port, name, protocol)| Port { host_port, name, protocol })
}

fn pull_policy() -> impl Strategy<Value = PullPolicy> {
    prop_oneof![Just(PullPolicy::Always), Just(PullPolicy::IfNotPresent)]
}

fn uri() -> impl Strategy<Value = Uri> {
    (text(), text(), text(), option::of(pull_policy()), text(), "([0-9a-f]{64})?").prop_map(
        |(value, user, pwd, pull_policy, output_dir, sha256)| Uri {
            value,
            user,
            pwd,
            pull_policy,
            image_pull_policy: None,
            output_dir,
            sha256,
        },
    )
}

fn check() -> impl Strategy<Value = HealthCheck> {
    let kind = prop_oneof![
        Just(CheckType::Http),
        Just(CheckType::Tcp),
        Just(CheckType::Command),
        Just(CheckType::RemoteHttp),
        Just(CheckType::RemoteTcp),
    ];
    let http = (any::<i64>(), text(), any::<bool>(), text(), btree_map(text(), text(), 0..3)).prop_map(
        |(port, port_name, https, path, headers)| HttpCheck {
            port,
            port_name,
            scheme: if https { Scheme::Https } else { Scheme::Http },
            path,
            headers,
        },
    );
    let tcp = (any::<i64>(), text()).prop_map(|(port, port_name)| TcpCheck { port, port_name });
    (
        option::of(kind),
        (seconds(), seconds(), seconds(), any::<u32>(), seconds()),
        option::of(text().prop_map(|value| CommandCheck { value })),
        option::of(http),
        option::of(tcp),
    )
        .prop_map(|(kind, (delay, interval, timeout, failures, grace), command, http, tcp)| HealthCheck {
            kind,
            delay_seconds: delay,
            interval_seconds: interval,
            timeout_seconds: timeout,
            consecutive_failures: failures,
            grace_period_seconds: grace,
            command,
            http,
            tcp,
        })
}

fn key_item() -> impl Strategy<Value = KeyItem> {
    (
        option::of(prop_oneof![Just(ItemType::Env), Just(ItemType::File)]),
        text(),
        text(),
        text(),
        text(),
        any::<bool>(),
        text(),
    )
        .prop_map(|(kind, data_key, data_key_alias, key_or_path, sub_path, read_only, user)| KeyItem {
            kind,
            data_key,
            data_key_alias,
            key_or_path,
            key_or_path_capitalized: String::new(),
            sub_path,
            read_only,
            user,
        })
}

fn handler() -> impl Strategy<Value = Handler> {
    let kind = prop_oneof![Just(HandlerType::Http), Just(HandlerType::Exec), Just(HandlerType::Tcp)];
    let scheme = prop_oneof![Just(HttpScheme::Http), Just(HttpScheme::Https)];
    (
        kind,
        vec(text(), 0..3),
        scheme,
        text(),
        any::<i64>(),
        text(),
        text(),
        vec((text(), text()).prop_map(|(name, value)| HeaderSpec { name, value }), 0..2),
    )
        .prop_map(|(kind, command, scheme, host, port, port_name, path, header)| Handler {
            kind,
            method: HandlerMethod { command, scheme, host, port, port_name, path, header },
        })
}

fn probe_spec() -> impl Strategy<Value = ProbeSpec> {
    (handler(), seconds(), seconds(), seconds(), any::<u32>(), any::<u32>()).prop_map(
        |(handler, delay, timeout, period, success, failure)| ProbeSpec {
            handler,
            delay,
            timeout,
            period,
            threshold: Threshold { success, failure },
        },
    )
}

fn lifecycle_parts() -> impl Strategy<Value = (Probes, Lifecycle, Vec<InitStep>)> {
    (
        option::of(probe_spec()),
        option::of(probe_spec()),
        option::of(handler()),
        option::of(handler()),
        vec((text(), text(), seconds()).prop_map(|(name, command, timeout)| InitStep { name, command, timeout }), 0..2),
    )
        .prop_map(|(liveness, readiness, post_start, pre_stop, init)| {
            (Probes { liveness, readiness }, Lifecycle { post_start, pre_stop }, init)
        })
}

fn process() -> impl Strategy<Value = Process> {
    (
        (text(), text(), text(), text(), vec(port(), 0..3), vec(uri(), 0..2)),
        (text(), seconds(), text(), text(), text()),
        (
            vec(check(), 0..3),
            option::of(number_text()),
            option::of(number_text()),
            vec((text(), text()).prop_map(|(name, value)| EnvVar { name, value }), 0..3),
            vec(
                (text(), vec(key_item(), 0..2), any::<bool>()).prop_map(|(secret_name, items, optional)| SecretRef {
                    secret_name,
                    items,
                    optional,
                }),
                0..2,
            ),
            vec(
                (text(), vec(key_item(), 0..2), any::<bool>()).prop_map(|(name, items, optional)| ConfigMapRef {
                    name,
                    items,
                    optional,
                }),
                0..2,
            ),
        )
            .boxed(),
        lifecycle_parts().boxed(),
        vec(env_from(), 0..3).boxed(),
    )
        .prop_map(
            |(
                (proc_name, user, work_path, pid_file, ports, uris),
                (start_cmd, start_grace_period, stop_cmd, restart_cmd, reload_cmd),
                (health_checks, cpu, memory, env, secrets, configmaps),
                (probe, lifecycle, initializers),
                env_from,
            )| Process {
                proc_name,
                user,
                work_path,
                pid_file,
                ports,
                uris,
                start_cmd,
                start_grace_period,
                stop_cmd,
                restart_cmd,
                reload_cmd,
                health_checks,
                probe,
                lifecycle,
                initializers,
                resources: Resources {
                    requests: Limits { cpu: memory.clone(), memory: cpu.clone(), gpu: None, pids: None },
                    limits: Limits { cpu, memory, gpu: None, pids: Some(NumberText("64".into())) },
                },
                env,
                env_from,
                secrets,
                configmaps,
            },
        )
}

/// Seed 003 `envFrom`.
fn env_from() -> impl Strategy<Value = EnvFrom> {
    let kind = prop_oneof![Just(EnvFromType::Config), Just(EnvFromType::Secret)];
    (kind, text(), text(), any::<bool>()).prop_map(|(kind, name, prefix, optional)| EnvFrom {
        kind,
        name,
        prefix,
        optional,
    })
}

fn union_data() -> impl Strategy<Value = UnionData> {
    let op = prop_oneof![
        Just(Operator::Unique),
        Just(Operator::MaxPer),
        Just(Operator::Cluster),
        Just(Operator::Like),
        Just(Operator::Unlike),
        Just(Operator::GroupBy),
        Just(Operator::Exclude),
        Just(Operator::Greater),
    ];
    (
        text(),
        option::of(op),
        prop_oneof![Just(0i64), Just(1), Just(3), Just(4), any::<i64>()],
        option::of(number_text().prop_map(|t| TextValue { value: NumberOrString(t) })),
        option::of(vec(text(), 0..3).prop_map(|item| SetValue { item })),
        option::of((-1e9f64..1e9).prop_map(|value| ScalarValue { value })),
    )
        .prop_map(|(name, operate, kind, text, set, scalar)| UnionData {
            name,
            operate,
            kind,
            text,
            set,
            scalar,
            scaler: None,
        })
}

fn count_or_percent() -> impl Strategy<Value = CountOrPercent> {
    prop_oneof![
        (0u64..10_000).prop_map(CountOrPercent::Count),
        (0u64..=100).prop_map(CountOrPercent::Percent),
        "[a-z]{1,4}".prop_map(CountOrPercent::Invalid),
    ]
}

fn hook_step() -> impl Strategy<Value = HookStep> {
    (text(), vec((text(), text()).prop_map(|(name, value)| HookStepArg { name, value }), 0..2))
        .prop_map(|(template, args)| HookStep { template, args })
}

fn scale_in_hook() -> impl Strategy<Value = ScaleInHook> {
    let on_timeout = prop_oneof![Just(OnTimeout::Keep), Just(OnTimeout::Delete)];
    (hook_step(), option::of(seconds()), on_timeout).prop_map(|(hook, timeout_seconds, on_timeout)| ScaleInHook {
        hook,
        timeout_seconds,
        on_timeout,
    })
}

fn rollout_step() -> impl Strategy<Value = RolloutStep> {
    prop_oneof![
        count_or_percent().prop_map(|p| RolloutStep { partition: Some(p), ..Default::default() }),
        hook_step().prop_map(|h| RolloutStep { hook: Some(h), ..Default::default() }),
        seconds().prop_map(|s| RolloutStep { pause: Some(PauseStep::Seconds(s)), ..Default::default() }),
        option::of(seconds())
            .prop_map(|duration| RolloutStep { pause: Some(PauseStep::For { duration }), ..Default::default() }),
    ]
}

fn update_strategy() -> impl Strategy<Value = UpdateStrategy> {
    let kind = prop_oneof![Just(StrategyType::Rolling), Just(StrategyType::Serial)];
    (
        kind,
        option::of(count_or_percent()),
        option::of(count_or_percent()),
        seconds(),
        option::of(seconds()),
        option::of(seconds()),
        any::<bool>(),
        (vec(rollout_step(), 0..3), option::of(hook_step()), option::of(hook_step()), option::of(scale_in_hook())),
    )
        .prop_map(
            |(
                kind,
                max_unavailable,
                max_surge,
                min_ready_seconds,
                pause_seconds,
                deadline,
                auto_rollback,
                (steps, pre_hook, post_hook, scale_in),
            )| {
                UpdateStrategy {
                    kind,
                    max_unavailable,
                    max_surge,
                    min_ready_seconds,
                    pause_seconds,
                    progress_deadline_seconds: deadline,
                    auto_rollback,
                    steps,
                    pre_hook,
                    post_hook,
                    scale_in,
                }
            },
        )
}

fn process_spec() -> impl Strategy<Value = ProcessSpec> {
    let policy = prop_oneof![
        Just(RestartPolicyKind::Never),
        Just(RestartPolicyKind::Always),
        Just(RestartPolicyKind::OnFailure)
    ];
    (
        (text(), text(), policy, seconds(), seconds(), any::<u32>(), seconds()),
        (text(), text(), btree_map(text(), text(), 0..3), any::<u32>()),
        vec(process(), 0..3),
        option::of(vec(vec(union_data(), 0..3).prop_map(|union_data| IntersectionItem { union_data }), 0..3)),
        update_strategy(),
        // Boxed: the strategy's nested types grow the stack frames of every case past the
        // test thread's stack.
        (option::of(job_spec()), option::of(cron_spec()), schedule(), option::of(disconnect())).boxed(),
    )
        .prop_map(
            |(
                (api_version, kind, policy, interval, backoff, maxtimes, grace_period),
                (name, namespace, labels, instance),
                processes,
                constraint,
                strategy,
                (job, cron_job, schedule, disconnect),
            )| ProcessSpec {
                api_version,
                kind,
                restart_policy: RestartPolicy { policy, interval, backoff, maxtimes },
                kill_policy: KillPolicy { grace_period },
                metadata: Metadata { name, namespace, labels },
                spec: SpecBody {
                    instance,
                    template: Template { spec: TemplateSpec { processes, ..Default::default() } },
                },
                constraint: constraint.map(|intersection_item| Constraint { intersection_item }),
                strategy,
                job,
                cron_job,
                dependencies: Vec::new(),
                daemon_set: None,
                stateful_set: None,
                schedule,
                services: Vec::new(),
                disconnect,
            },
        )
}

fn disconnect() -> impl Strategy<Value = Disconnect> {
    let reconcile = prop_oneof![Just(DisconnectReconcile::KeepReplacement), Just(DisconnectReconcile::KeepOriginal)];
    (option::of(seconds()), option::of(seconds()), reconcile).prop_map(
        |(stop_after_secs, replace_after_secs, reconcile)| Disconnect {
            stop_after_secs,
            replace_after_secs,
            reconcile,
        },
    )
}

fn expression() -> impl Strategy<Value = Expression> {
    let op = prop_oneof![
        Just(ExpressionOperator::In),
        Just(ExpressionOperator::NotIn),
        Just(ExpressionOperator::Exists),
        Just(ExpressionOperator::DoesNotExist),
        Just(ExpressionOperator::Gt),
        Just(ExpressionOperator::Lt)
    ];
    (text(), option::of(op), vec(text(), 0..3)).prop_map(|(key, operator, value)| Expression { key, operator, value })
}

fn affinity_type() -> impl Strategy<Value = AffinityType> {
    prop_oneof![Just(AffinityType::Required), Just(AffinityType::Prefered)]
}

fn pod_affinity() -> impl Strategy<Value = Option<PodAffinity>> {
    let term = (0u32..200, text(), vec(text(), 0..2), btree_map(text(), text(), 0..2), vec(expression(), 0..2))
        .prop_map(|(weight, topology_key, namespaces, labels, expressions)| PodAffinityTerm {
            weight,
            topology_key,
            namespaces,
            selector: LabelSelector { labels, expressions },
        });
    option::of((affinity_type(), vec(term, 0..3)).prop_map(|(kind, terms)| PodAffinity { kind, terms }))
}

/// Seed 003's `schedule`: node and pod affinity terms, tolerations, labels.
fn schedule() -> impl Strategy<Value = Schedule> {
    let node_term =
        (0u32..200, vec(expression(), 0..3)).prop_map(|(weight, expressions)| NodeAffinityTerm { weight, expressions });
    let node =
        option::of((affinity_type(), vec(node_term, 0..3)).prop_map(|(kind, terms)| NodeAffinity { kind, terms }));
    let effect = option::of(prop_oneof![
        Just(TaintEffect::NoScheduler),
        Just(TaintEffect::PreferNoScheduler),
        Just(TaintEffect::NoExecute)
    ]);
    let toleration_op = prop_oneof![Just(TolerationOperator::Exists), Just(TolerationOperator::Equal)];
    let toleration = (text(), toleration_op, text(), effect, option::of(0u64..1000)).prop_map(
        |(key, operator, value, effect, toleration_seconds)| Toleration {
            key,
            operator,
            value,
            effect,
            toleration_seconds,
        },
    );
    (btree_map(text(), text(), 0..2), node, pod_affinity(), pod_affinity(), vec(toleration, 0..3)).prop_map(
        |(labels, node, pod, anti, tolerations)| Schedule {
            scheduler: String::new(),
            labels,
            affinity: Affinity { pod, node },
            antiaffinity: AntiAffinity { pod: anti },
            tolerations,
        },
    )
}

fn cron_spec() -> impl Strategy<Value = CronJobSpec> {
    let policy =
        prop_oneof![Just(ConcurrencyPolicy::Allow), Just(ConcurrencyPolicy::Forbid), Just(ConcurrencyPolicy::Replace)];
    (text(), text(), seconds(), policy, any::<bool>(), any::<u32>(), any::<u32>()).prop_map(
        |(rule, time_zone, deadline, policy, suspend, success, fail)| CronJobSpec {
            rule,
            time_zone,
            deadline,
            policy,
            suspend,
            history: CronHistory { success, fail },
        },
    )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (any::<u32>(), any::<u32>(), seconds(), seconds(), any::<u32>(), seconds()).prop_map(
        |(parallelism, completions, active, job_deadline, backoff_limit, backoff_seconds)| JobSpec {
            parallelism,
            completions,
            active,
            job_deadline,
            backoff_limit,
            backoff_seconds,
        },
    )
}

fn decode_clean(doc: &serde_json::Value) -> ProcessSpec {
    let (spec, errors) = spec::decode(doc);
    assert!(errors.is_empty(), "decoding what the model wrote found mistakes: {errors:?}");
    spec.expect("decoded")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn json_model_json(model in process_spec()) {
        let json = serde_json::to_string(&model).unwrap();
        let doc = spec::parse_document(&json, Format::Json).unwrap();
        let back = decode_clean(&doc);
        prop_assert_eq!(&back, &model);
        prop_assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    #[test]
    fn toml_and_json_agree(model in process_spec()) {
        let toml_text = toml::to_string(&model).unwrap();
        let from_toml = decode_clean(&spec::parse_document(&toml_text, Format::Toml).unwrap());
        prop_assert_eq!(&from_toml, &model);
        let json = serde_json::to_string(&from_toml).unwrap();
        let from_json = decode_clean(&spec::parse_document(&json, Format::Json).unwrap());
        prop_assert_eq!(toml::to_string(&from_json).unwrap(), toml_text);
    }
}

/// The tolerated spellings read as their canonical fields and are written canonically.
#[test]
fn alternative_spellings_are_folded() {
    let doc = serde_json::json!({
        "spec": {"template": {"spec": {"processes": [{
            "uris": [{"value": "/p.tgz", "imagePullPolicy": "Always"}],
            "configmaps": [{"name": "c", "items": [{"type": "file", "dataKey": "k", "KeyOrPath": "conf/x"}]}]
        }]}}},
        "constraint": {"intersectionItem": [{"unionData": [
            {"name": "cpu", "operate": "GREATER", "type": 1, "scaler": {"value": 2.5}},
            {"name": "hostname", "operate": "ClUSTER", "type": 4, "set": {"item": ["a"]}}
        ]}]}
    });
    let model = decode_clean(&doc);
    let p = &model.spec.template.spec.processes[0];
    assert_eq!(p.uris[0].pull_policy, Some(PullPolicy::Always));
    assert_eq!(p.configmaps[0].items[0].key_or_path, "conf/x");
    let u = &model.constraint.as_ref().unwrap().intersection_item[0].union_data;
    assert_eq!(u[0].scalar, Some(ScalarValue { value: 2.5 }));
    assert_eq!(u[1].operate, Some(Operator::Cluster));
    let written = serde_json::to_string(&model).unwrap();
    for canonical in ["\"pullPolicy\":\"Always\"", "\"keyOrPath\":\"conf/x\"", "\"scalar\"", "\"CLUSTER\""] {
        assert!(written.contains(canonical), "{canonical} missing from {written}");
    }
    for alternative in ["imagePullPolicy", "KeyOrPath", "scaler", "ClUSTER"] {
        assert!(!written.contains(alternative), "{alternative} written back in {written}");
    }
}

#[test]
fn conflicting_spellings_are_reported() {
    let doc = serde_json::json!({"spec": {"template": {"spec": {"processes": [{
        "uris": [{"value": "/p.tgz", "pullPolicy": "IfNotPresent", "imagePullPolicy": "Always"}]
    }]}}}});
    let (_, errors) = spec::decode(&doc);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, "spec.template.spec.processes[0].uris[0]");
    assert!(errors[0].message.contains("disagree"));
}
