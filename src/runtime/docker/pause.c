/*
 * The network holder of a pod (the role Kubernetes' pause container plays): the first
 * container of a pod with more than one, whose network namespace the others join. It must
 * outlive every one of them, even a main container that exits at once, so it does nothing,
 * forever, and ends only by SIGKILL (`docker rm -f`; as PID 1 of its namespace it ignores
 * SIGTERM). No libc: a few bytes of static code for each architecture the daemon builds on.
 */
#if defined(__x86_64__)
void _start(void) {
    for (;;)
        __asm__ volatile("mov $34, %%eax\n\tsyscall" ::: "rax", "rcx", "r11", "memory"); /* pause() */
}
#elif defined(__aarch64__)
void _start(void) {
    for (;;)
        __asm__ volatile("mov x0, #0\n\tmov x1, #0\n\tmov x2, #0\n\tmov x3, #0\n\tmov x8, #73\n\tsvc #0" /* ppoll(NULL, 0, NULL, NULL) */
                         ::: "x0", "x1", "x2", "x3", "x8", "memory");
}
#else
#error "no pod network holder for this architecture (x86_64 and aarch64 are supported)"
#endif
