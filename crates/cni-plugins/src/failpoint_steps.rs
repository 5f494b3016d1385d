// The one list of the CNI plugins' failpoints (see `failpoint.rs`), by plugin and verb,
// each step named after what was just made or removed: `bridge.add.after_veth` is "the
// veth pair exists, its pod end already in the pod's namespace". Included by the plugins
// (the names) and by the crash suite (one test per step: tests/tests/cni/cni_crash.rs),
// so a step added here is a test added there. Every step is a `failpoint!` mark with its
// name in exactly one place of the source (checked by a unit test).
//
// `cni_failpoint_steps!(then)` calls the macro `then` with the list as
// `plugin { verb { step, ... } ... } plugin { ... }`.
macro_rules! cni_failpoint_steps {
    ($then:ident) => {
        $then! {
            bridge {
                add {
                    after_bridge,
                    after_veth,
                    after_port,
                    after_ipam,
                    after_addresses,
                    after_routes,
                    after_gateway,
                    after_rules,
                    after_finisher,
                }
                del {
                    after_ipam,
                    after_rules,
                    after_link,
                }
                finish {
                    before_dellink,
                    after_dellink,
                }
            }
            host_local {
                add {
                    after_create,
                    after_reserve,
                    after_last_reserved,
                    after_all,
                }
                del {
                    after_release,
                }
                gc {
                    after_release,
                }
            }
        }
    };
}
