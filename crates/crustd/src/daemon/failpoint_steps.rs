// The one list of crustd's failpoints (see `failpoint.rs`), by RPC, each step named
// after what was just made: `run_sandbox.after_pause` is "the pause process has
// started". Included by crustd (the names) and by the crash suite (one test per step:
// tests/tests/faults/crash.rs), so a step added here is a test added there. Every step is
// a `failpoint!` mark with its name in exactly one place of the source (checked by a unit
// test).
//
// `failpoint_steps!(then)` calls the macro `then` with the list as
// `rpc { step, step, ... } rpc { ... }`.
macro_rules! failpoint_steps {
    ($then:ident) => {
        $then! {
            run_sandbox {
                after_record,
                after_pause,
                after_pins,
                after_cni_add,
                after_pod_files,
                after_ready,
            }
            create_container {
                after_record,
                after_rootfs,
                after_spec,
                after_created_record,
                after_init,
            }
            start_container {
                after_gate,
                after_record,
            }
            stop_container {
                after_stop_signal,
                after_exit,
            }
            remove_container {
                after_exec_delete,
                after_cgroup,
                after_snapshot,
                after_files,
            }
            stop_sandbox {
                after_containers,
                after_pause,
                after_cni_del,
                after_unpin,
                after_record,
            }
            remove_sandbox {
                after_containers,
                after_cgroup,
                after_files,
            }
            pull_image {
                after_blobs,
                after_layers,
                after_record,
            }
        }
    };
}
