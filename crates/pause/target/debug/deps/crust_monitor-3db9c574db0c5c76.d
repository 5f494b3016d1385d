/work/main/crates/pause/target/debug/deps/crust_monitor-3db9c574db0c5c76.d: src/monitor.rs src/monitor_core.rs src/sys.rs Cargo.toml

/work/main/crates/pause/target/debug/deps/libcrust_monitor-3db9c574db0c5c76.rmeta: src/monitor.rs src/monitor_core.rs src/sys.rs Cargo.toml

src/monitor.rs:
src/monitor_core.rs:
src/sys.rs:
Cargo.toml:

# env-dep:CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
# env-dep:CLIPPY_CONF_DIR
