//! Generates the CRI v1 bindings from `proto/api.proto` at the workspace root.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate, so building this crate does not
//! need a protobuf compiler installed on the machine.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest_dir.join("../../proto");
    let api_proto = proto_dir.join("api.proto");
    // api.proto imports gogo.proto (Go code-generation options only), which in turn
    // imports google/protobuf/descriptor.proto from protoc's bundled include directory.
    let gogo_proto = proto_dir.join("github.com/gogo/protobuf/gogoproto/gogo.proto");
    let protoc_include = protoc_bin_vendored::include_path()?;

    // prost-build runs whatever `PROTOC` names. Build scripts are single-threaded, so
    // setting it here is safe (it becomes `unsafe` only in edition 2024).
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);

    println!("cargo:rerun-if-changed={}", api_proto.display());
    println!("cargo:rerun-if-changed={}", gogo_proto.display());

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[api_proto], &[proto_dir, protoc_include])?;
    Ok(())
}
