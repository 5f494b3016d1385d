//! WebSocket frames (channel.k8s.io, v4 and v5) as a client of the streaming server
//! sends them after the upgrade: the whole input is the client's side of the
//! connection, then it hangs up. stdin and resize are read as the server reads them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let protocol = if data.first().is_some_and(|b| b & 1 == 1) {
        "v5.channel.k8s.io"
    } else {
        "v4.channel.k8s.io"
    };
    let data = data.to_vec();
    rt.block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let peer = tokio::spawn(async move {
            let mut sink = vec![0u8; 16 * 1024];
            let (mut rd, mut wr) = tokio::io::split(&mut client);
            let write = async {
                let _ = wr.write_all(&data).await;
                let _ = wr.shutdown().await;
            };
            let read = async { while matches!(rd.read(&mut sink).await, Ok(n) if n > 0) {} };
            tokio::join!(write, read);
        });
        let mut conn = streaming::ws::Conn::server(server, protocol);
        let mut stdin = conn.take_input(0).unwrap();
        let mut resize = conn.take_input(4).unwrap();
        tokio::spawn(async move { while stdin.recv().await.is_some() {} });
        tokio::spawn(async move { while resize.recv().await.is_some() {} });
        tokio::time::timeout(Duration::from_secs(10), conn.closed())
            .await
            .expect("the connection did not end after the peer hung up");
        drop(conn);
        peer.abort();
    });
});
