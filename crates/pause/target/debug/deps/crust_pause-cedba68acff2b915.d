/work/main/crates/pause/target/debug/deps/crust_pause-cedba68acff2b915.d: src/main.rs src/sys.rs Cargo.toml

/work/main/crates/pause/target/debug/deps/libcrust_pause-cedba68acff2b915.rmeta: src/main.rs src/sys.rs Cargo.toml

src/main.rs:
src/sys.rs:
Cargo.toml:

# env-dep:CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
# env-dep:CLIPPY_CONF_DIR
