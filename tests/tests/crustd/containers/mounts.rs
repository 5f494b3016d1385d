//! Mounts: the pod's shared /dev/shm, mount propagation, recursive read-only mounts and
//! image volumes.

use super::*;
use crust_e2e::crustd::Crustd;
use crust_e2e::registry::Registry;
use crust_e2e::{which, TempDir};

/// Containers of a pod share its /dev/shm (as they share its IPC namespace); the
/// tmpfs is gone after StopPodSandbox.
#[tokio::test]
async fn pod_shares_dev_shm() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("shm").await;
    let a = e
        .create(
            &pod,
            ctr(
                "writer",
                &[
                    "sh",
                    "-c",
                    "echo shared > /dev/shm/note; grep shm /proc/self/mountinfo >&2",
                ],
            ),
        )
        .await;
    e.start(&a).await;
    let sa = e.wait_exited(&a).await;
    assert_eq!(sa.exit_code, 0);
    eprintln!("{:?}", log_lines(Path::new(&sa.log_path)));
    let b = e
        .create(&pod, ctr("reader", &["cat", "/dev/shm/note"]))
        .await;
    e.start(&b).await;
    let s = e.wait_exited(&b).await;
    let lines = log_lines(Path::new(&s.log_path));
    assert_eq!(s.exit_code, 0, "{lines:?} {}", e.d.log_text());
    assert!(lines.iter().any(|l| l.3 == "shared"), "{lines:?}");
    e.stop_pod(&pod.0).await;
    assert!(e.d.mounts().is_empty(), "{:?}", e.d.mounts());
}

/// Mount propagation: a mount made on the host under a HostToContainer (rslave) mount
/// after the container started shows inside it; under a private one it does not; and
/// a Bidirectional (rshared) mount of a privileged container shows a mount made
/// inside on the host.
#[tokio::test]
async fn mount_propagation() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    let pod = e.pod("prop").await;
    let host = TempDir::new("prop");
    let src = host.path().join("src");
    std::fs::create_dir_all(src.join("late")).unwrap();
    let sh = |args: &[&str]| {
        let st = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap();
        assert!(st.success(), "{args:?}");
    };
    // A shared mount point, as the kubelet's pod volumes dir is on a systemd host.
    let src_s = src.display().to_string();
    let mut guard = HostMounts(vec![]);
    sh(&["mount", "--bind", &src_s, &src_s]);
    guard.0.push(src.clone());
    sh(&["mount", "--make-shared", &src_s]);

    let mut cfg = ctr("c", &["sleep", "1000"]);
    for (dest, prop) in [
        ("/slave", MountPropagation::PropagationHostToContainer),
        ("/private", MountPropagation::PropagationPrivate),
    ] {
        cfg.mounts.push(Mount {
            container_path: dest.into(),
            host_path: src_s.clone(),
            propagation: prop as i32,
            ..Default::default()
        });
    }
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;

    let late = src.join("late");
    sh(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=1m",
        "late",
        &late.display().to_string(),
    ]);
    guard.0.push(late.clone());
    std::fs::write(late.join("marker"), "propagated").unwrap();
    let out = |r: ExecSyncResponse| String::from_utf8_lossy(&r.stdout).trim().to_string();
    let r = e
        .exec(&id, &["cat", "/slave/late/marker"], 10)
        .await
        .unwrap();
    assert_eq!(
        out(r),
        "propagated",
        "HostToContainer sees later host mounts"
    );
    let r = e.exec(&id, &["ls", "/private/late"], 10).await.unwrap();
    assert_eq!(out(r), "", "a private mount does not");
    e.remove(&id).await;

    // Bidirectional: a privileged container's mount reaches the host.
    let mut cfg = ctr("b", &["sh", "-c", "mkdir -p /shared/inner && busybox mount -t tmpfs inner /shared/inner && echo x > /shared/inner/f && sleep 1000"]);
    cfg.mounts.push(Mount {
        container_path: "/shared".into(),
        host_path: src_s.clone(),
        propagation: MountPropagation::PropagationBidirectional as i32,
        ..Default::default()
    });
    sc(&mut cfg).privileged = true;
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let inner = src.join("inner");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !inner.join("f").exists() {
        assert!(
            Instant::now() < deadline,
            "the container's mount did not reach the host"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    guard.0.push(inner);
    e.remove(&id).await;
}

/// Recursive read-only mounts (the kubelet's `recursiveReadOnly: Enabled`), as the
/// conformance suite checks them: Status says the handler makes them; a mount of a
/// directory with a tmpfs inside is read-only in the tmpfs too, while a plain read-only
/// mount leaves the tmpfs writable; one that is not read-only, or not private, is
/// refused and leaves nothing.
#[tokio::test]
async fn recursive_read_only_mounts() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    assert!(e.handler_features("").await.recursive_read_only_mounts);

    let pod = e.pod("rro").await;
    let host = TempDir::new("rro");
    let tmpfs = host.path().join("tmpfs");
    std::fs::create_dir_all(&tmpfs).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "rro"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(st.success());
    let _guard = HostMounts(vec![tmpfs.clone()]);
    let mount = |recursive: bool, readonly: bool, prop: MountPropagation| Mount {
        container_path: "/mnt".into(),
        host_path: host.path().display().to_string(),
        readonly,
        recursive_read_only: recursive,
        propagation: prop as i32,
        ..Default::default()
    };
    let touch = |e: &mut Env, id: String, file: &'static str| {
        let c = e.c.clone();
        async move {
            let mut c = c;
            c.exec_sync(ExecSyncRequest {
                container_id: id,
                cmd: vec!["sh".into(), "-c".into(), format!("touch {file} 2>&1")],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner()
        }
    };

    let mut cfg = ctr("rro", &["sleep", "1000"]);
    cfg.mounts = vec![mount(true, true, MountPropagation::PropagationPrivate)];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let r = touch(&mut e, id.clone(), "/mnt/tmpfs/foo").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    assert!(
        String::from_utf8_lossy(&r.stdout).contains("Read-only file system"),
        "{r:?}"
    );
    let r = touch(&mut e, id.clone(), "/mnt/top").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    e.remove(&id).await;

    let mut cfg = ctr("ro", &["sleep", "1000"]);
    cfg.mounts = vec![mount(false, true, MountPropagation::PropagationPrivate)];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let r = touch(&mut e, id.clone(), "/mnt/tmpfs/file").await;
    assert_eq!(
        r.exit_code, 0,
        "a plain read-only mount is not recursive: {r:?}"
    );
    let r = touch(&mut e, id.clone(), "/mnt/top").await;
    assert_ne!(r.exit_code, 0, "{r:?}");
    e.remove(&id).await;

    let before = e.d.leftovers();
    for (what, m) in [
        (
            "recursive read-only, not read-only",
            mount(true, false, MountPropagation::PropagationPrivate),
        ),
        (
            "recursive read-only, host to container",
            mount(true, true, MountPropagation::PropagationHostToContainer),
        ),
        (
            "recursive read-only, bidirectional",
            mount(true, true, MountPropagation::PropagationBidirectional),
        ),
    ] {
        let mut cfg = ctr("bad", &["sleep", "1000"]);
        cfg.mounts = vec![m];
        assert_code(e.try_create(&pod, cfg).await, Code::InvalidArgument, what);
    }
    assert_eq!(snapshots(&e.d), 0);
    assert_eq!(e.d.leftovers(), before);
}

/// Imports `docker.io/library/vol:e2e` (see [`write_volume_layout`]).
fn import_volume_image(d: &Crustd) {
    let t = TempDir::new("layout");
    write_volume_layout(t.path());
    let store = image::ImageStore::open(d.root.path().join("images"), None).unwrap();
    store.import(t.path()).expect("importing vol:e2e");
}

/// Writes the OCI layout of `docker.io/library/vol:e2e` (ref name `e2e`) into `dir`,
/// three layers: the bottom one with files, a directory the middle one deletes
/// (whiteout) and one it makes opaque, and a busybox to run from the volume; the top
/// one overrides a file.
fn write_volume_layout(dir: &Path) {
    use image::layout::{write_oci_layout, Compression, LayerBuilder, LayoutEntry, LayoutImage};
    let bb = which("busybox").expect("busybox");
    let low = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/a", b"a1", 0o644)
        .dir("etc", 0o755)
        .file("etc/conf", b"base", 0o644)
        .dir("gone", 0o755)
        .file("gone/x", b"x", 0o644)
        .dir("opq", 0o755)
        .file("opq/old", b"old", 0o644)
        .dir("tools", 0o755)
        .file_from("tools/busybox", &bb, 0o755)
        .finish();
    let mid = LayerBuilder::new()
        .dir("data", 0o755)
        .file("data/b", b"b2", 0o644)
        .whiteout("gone")
        .dir("opq", 0o755)
        .opaque("opq")
        .file("opq/new", b"new", 0o644)
        .finish();
    let top = LayerBuilder::new()
        .dir("etc", 0o755)
        .file("etc/conf", b"top", 0o644)
        .finish();
    let img = LayoutImage::new(vec![
        (low, Compression::Gzip),
        (mid, Compression::Gzip),
        (top, Compression::None),
    ]);
    write_oci_layout(
        dir,
        &[LayoutEntry {
            ref_name: Some("e2e".into()),
            image_name: Some("docker.io/library/vol:e2e".into()),
            platforms: vec![img],
        }],
    );
}

fn image_mount(path: &str, sub: &str, readonly: bool) -> Mount {
    Mount {
        container_path: path.into(),
        readonly,
        image: Some(ImageSpec {
            image: "vol:e2e".into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        ..Default::default()
    }
}

/// An image volume's mount in ContainerStatus names its image by the id PullImage
/// answered (what the kubelet passes as the mount's image), not by a repo digest: the
/// CRI conformance suite's image volume spec compares the two, and containerd fills
/// it with the same config digest. The image here is pulled from a registry, so it has
/// a repo digest that differs from the id; the name holds after the image is removed.
#[tokio::test]
async fn image_volume_status_names_the_image_by_the_id_pull_gave() {
    if !require_root(&[
        "ip",
        "nsenter",
        "nft",
        "busybox",
        "skopeo",
        "docker-registry",
    ]) {
        return;
    }
    let mut e = setup().await;
    let reg = Registry::start_with(None, Some(&e.d.node));
    let t = TempDir::new("layout");
    write_volume_layout(t.path());
    reg.push(t.path(), "e2e", "vol/pulled:v1");
    let name = reg.name("vol/pulled:v1");
    let spec = |image: &str| ImageSpec {
        image: image.into(),
        ..Default::default()
    };
    let mut images = e.d.images().await;
    let pulled = images
        .pull_image(PullImageRequest {
            image: Some(spec(&name)),
            ..Default::default()
        })
        .await
        .expect("PullImage")
        .into_inner()
        .image_ref;
    let img = images
        .image_status(ImageStatusRequest {
            image: Some(spec(&name)),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .expect("the pulled image is there");
    assert_eq!(img.id, pulled);
    assert!(
        img.repo_digests.iter().all(|d| *d != pulled) && !img.repo_digests.is_empty(),
        "a pulled image has a repo digest other than its id: {:?}",
        img.repo_digests
    );

    let pod = e.pod("ivref").await;
    let mut cfg = ctr("c", &["sleep", "1000"]);
    cfg.mounts = vec![Mount {
        container_path: "/vol".into(),
        readonly: true,
        image: Some(ImageSpec {
            image: pulled.clone(),
            user_specified_image: name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    let id = e.create(&pod, cfg).await;
    let refs = |st: &ContainerStatus| -> Vec<String> {
        st.mounts
            .iter()
            .filter_map(|m| m.image.as_ref().map(|i| i.image_ref.clone()))
            .collect()
    };
    let (st, _) = e.status(&id).await;
    assert_eq!(refs(&st), vec![pulled.clone()], "{:?}", st.mounts);

    images
        .remove_image(RemoveImageRequest {
            image: Some(spec(&name)),
        })
        .await
        .unwrap();
    let (st, _) = e.status(&id).await;
    assert_eq!(
        refs(&st),
        vec![pulled],
        "the image removed: {:?}",
        st.mounts
    );
    e.remove(&id).await;
}

/// Image volumes (a Mount with `image`): the image's file system as its layers make it
/// (an override, a whiteout, an opaque directory), read-only but executable, whole or
/// one directory of it (`image_sub_path`, from several layers or one); kept while the
/// container lives even when the image is removed; gone with the container. Refused
/// up front, leaving nothing: a writable one, a sub path that is no directory of the
/// image or climbs out, an unknown image.
#[tokio::test]
async fn image_volumes_mount_an_image_read_only() {
    if !root() {
        return;
    }
    let mut e = setup().await;
    import_volume_image(&e.d);
    let pod = e.pod("imgvol").await;
    let before = snapshots(&e.d);
    let mut cfg = ctr("c", &["sleep", "1000"]);
    cfg.mounts = vec![
        image_mount("/vol", "", true),
        image_mount("/sub", "data", true),
        image_mount("/opq", "./opq", true),
    ];
    let id = e.create(&pod, cfg).await;
    e.start(&id).await;
    let out = |r: Result<ExecSyncResponse, tonic::Status>| {
        let r = r.expect("ExecSync");
        (
            r.exit_code,
            String::from_utf8_lossy(&r.stdout).trim().to_string(),
        )
    };
    let check = [
        ("cat /vol/etc/conf", "top"),
        ("ls /vol", "data etc opq tools"),
        ("cat /vol/data/a /vol/data/b", "a1b2"),
        ("ls /vol/opq", "new"),
        ("cat /sub/a /sub/b", "a1b2"),
        ("ls /opq", "new"),
        (
            "/vol/tools/busybox echo ran from the volume",
            "ran from the volume",
        ),
    ];
    for (cmd, want) in check {
        let (code, got) = out(e
            .exec(&id, &["sh", "-c", &format!("{cmd} | tr '\\n' ' '")], 10)
            .await);
        assert_eq!((code, got.trim()), (0, want), "{cmd}");
    }
    for dir in ["/vol", "/sub", "/opq"] {
        let (code, _) = out(e
            .exec(&id, &["touch", &format!("{dir}/new-file")], 10)
            .await);
        assert_ne!(code, 0, "{dir} is writable");
    }
    assert_eq!(
        snapshots(&e.d),
        before + 4,
        "the root and three image volumes"
    );
    // Each image volume's mount in the status names the image it shows by its id
    // (see image_volume_status_names_the_image_by_the_id_pull_gave).
    let mut images = e.d.images().await;
    let img = images
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: "vol:e2e".into(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .expect("vol:e2e is there");
    let want = img.id.clone();
    let refs = |st: &ContainerStatus| -> Vec<String> {
        st.mounts
            .iter()
            .map(|m| {
                m.image
                    .as_ref()
                    .map(|i| i.image_ref.clone())
                    .unwrap_or_default()
            })
            .collect()
    };
    let (st, _) = e.status(&id).await;
    assert_eq!(refs(&st), vec![want.clone(); 3], "{:?}", st.mounts);

    // The image goes; the volumes stay whole while the container lives.
    images
        .remove_image(RemoveImageRequest {
            image: Some(ImageSpec {
                image: "vol:e2e".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let (_, got) = out(e.exec(&id, &["cat", "/vol/etc/conf", "/sub/b"], 10).await);
    assert_eq!(got, "topb2");
    let (st, _) = e.status(&id).await;
    assert_eq!(
        refs(&st),
        vec![want; 3],
        "the image removed: {:?}",
        st.mounts
    );
    e.remove(&id).await;
    assert_eq!(snapshots(&e.d), before);

    import_volume_image(&e.d);
    for (m, code, what) in [
        (
            image_mount("/v", "", false),
            Code::InvalidArgument,
            "writable",
        ),
        (
            image_mount("/v", "nope", true),
            Code::InvalidArgument,
            "missing sub path",
        ),
        (
            image_mount("/v", "etc/conf", true),
            Code::InvalidArgument,
            "a file as sub path",
        ),
        (
            image_mount("/v", "gone", true),
            Code::InvalidArgument,
            "a deleted sub path",
        ),
        (
            image_mount("/v", "../etc", true),
            Code::InvalidArgument,
            "climbing out",
        ),
        (
            Mount {
                image: Some(ImageSpec {
                    image: "no/such:image".into(),
                    ..Default::default()
                }),
                ..image_mount("/v", "", true)
            },
            Code::NotFound,
            "unknown image",
        ),
    ] {
        let mut cfg = ctr("bad", &["true"]);
        cfg.mounts = vec![image_mount("/ok", "", true), m];
        assert_code(e.try_create(&pod, cfg).await, code, what);
        assert_eq!(snapshots(&e.d), before, "{what} left a snapshot");
    }
}
