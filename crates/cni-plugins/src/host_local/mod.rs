//! The `host-local` IPAM plugin: addresses from configured ranges, reserved in files
//! on the node, one address per range set per attachment.

pub mod allocator;
pub mod config;
pub mod store;

use crate::failpoint::failpoint;
use crate::host_local::config::{parse_resolv_conf, IpamConfig};
use crate::host_local::store::{DiskStore, Store};
use cni::skeleton::{Args, Plugin};
use cni::types::{Attachment, VALID_ATTACHMENTS};
use cni::{code, AddResult, CniError, CniResult};

pub struct HostLocal;

/// The `CNI_ARGS` keys host-local reads (a requested address); DEL takes any, so that
/// releasing never fails on them.
const KNOWN_ARGS: &[&str] = &["IP"];

impl HostLocal {
    fn config(args: &Args) -> CniResult<IpamConfig> {
        IpamConfig::parse(&args.stdin, &args.args)
    }
}

/// The reference host-local reports every failure of ADD, DEL and CHECK past its
/// skeleton's own checks (JSON, name, version, environment) as a plain error, code 999:
/// a bad range, a requested address it cannot give, an unreadable resolvConf or
/// dataDir. Ours says the same, so a runtime sees one code from either plugin; an
/// exhausted range stays 11 (try again later), which the reference lacks.
fn as_reference<T>(r: CniResult<T>) -> CniResult<T> {
    r.map_err(|e| match e.code {
        code::TRY_AGAIN_LATER | code::INTERNAL => e,
        _ => CniError::new(code::INTERNAL, e.msg),
    })
}

impl Plugin for HostLocal {
    fn add(&self, args: &Args) -> CniResult<AddResult> {
        as_reference(add(args))
    }

    fn del(&self, args: &Args) -> CniResult<()> {
        as_reference(del(args))
    }

    fn check(&self, args: &Args) -> CniResult<()> {
        as_reference(check(args))
    }

    fn status(&self, args: &Args) -> CniResult<()> {
        status(args)
    }

    fn gc(&self, args: &Args) -> CniResult<()> {
        gc(args)
    }
}

fn add(args: &Args) -> CniResult<AddResult> {
    args.known_args_only(KNOWN_ARGS)?;
    let conf = HostLocal::config(args)?;
    let dns = match &conf.resolv_conf {
        Some(p) => parse_resolv_conf(
            &std::fs::read_to_string(p)
                .map_err(|e| CniError::io(format!("reading resolvConf {}: {e}", p.display())))?,
        ),
        None => cni::Dns::default(),
    };
    let mut store = DiskStore::open(&conf.data_dir, &conf.name)?;
    let mut requested = conf.requested.clone();
    let mut ips = Vec::new();
    let mut fresh = Vec::new();
    let outcome = (|| -> CniResult<()> {
        for (i, set) in conf.range_sets.iter().enumerate() {
            let want = requested
                .iter()
                .position(|a| set.iter().any(|r| r.contains(*a)))
                .map(|p| requested.remove(p));
            let a =
                allocator::allocate(&mut store, set, i, &args.container_id, &args.ifname, want)?;
            if a.fresh {
                fresh.push(a.ip.address.ip());
            }
            ips.push(a.ip);
        }
        if !requested.is_empty() {
            return Err(CniError::config(format!(
                "requested IPs {:?} are in none of the configured ranges",
                requested.iter().map(|a| a.to_string()).collect::<Vec<_>>()
            )));
        }
        Ok(())
    })();
    if let Err(e) = outcome {
        // Give back only what this call took; an earlier ADD's addresses stay.
        for ip in fresh {
            let _ = store.release(ip);
        }
        return Err(e);
    }
    failpoint!("host_local.add.after_all");
    Ok(AddResult {
        cni_version: args.conf.cni_version.clone(),
        interfaces: vec![],
        ips,
        routes: conf.routes,
        dns,
    })
}

fn del(args: &Args) -> CniResult<()> {
    let conf = HostLocal::config(args)?;
    let Some(mut store) = DiskStore::open_existing(&conf.data_dir, &conf.name)? else {
        return Ok(());
    };
    for r in store.reservations()? {
        if r.is_for(&args.container_id, &args.ifname) {
            store.release(r.ip)?;
            failpoint!("host_local.del.after_release");
        }
    }
    Ok(())
}

fn check(args: &Args) -> CniResult<()> {
    args.known_args_only(KNOWN_ARGS)?;
    let conf = HostLocal::config(args)?;
    let held: Vec<_> = match DiskStore::open_existing(&conf.data_dir, &conf.name)? {
        Some(s) => s
            .reservations()?
            .into_iter()
            .filter(|r| r.is_for(&args.container_id, &args.ifname))
            .collect(),
        None => vec![],
    };
    for set in &conf.range_sets {
        if !held.iter().any(|r| set.iter().any(|rg| rg.contains(r.ip))) {
            return Err(CniError::internal(format!(
                "host-local: {}/{} holds no address in range set {}-{}",
                args.container_id,
                args.ifname,
                set[0].start,
                set[set.len() - 1].end
            )));
        }
    }
    if let Some(prev) = args.conf.prev_result()? {
        for ip in &prev.ips {
            if !held.iter().any(|r| r.ip == ip.address.ip()) {
                return Err(CniError::internal(format!(
                    "host-local: {} from prevResult is not reserved for {}/{}",
                    ip.address.ip(),
                    args.container_id,
                    args.ifname
                )));
            }
        }
    }
    Ok(())
}

fn status(args: &Args) -> CniResult<()> {
    let conf = HostLocal::config(args)?;
    let store = DiskStore::open(&conf.data_dir, &conf.name).map_err(|e| {
        CniError::new(
            code::PLUGIN_NOT_AVAILABLE,
            format!("host-local store unusable: {}", e.msg),
        )
    })?;
    let probe = conf
        .data_dir
        .join(&conf.name)
        .join(format!(".status-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        CniError::new(
            code::PLUGIN_NOT_AVAILABLE,
            format!(
                "host-local store {} is not writable: {e}",
                conf.data_dir.display()
            ),
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    for set in &conf.range_sets {
        if !allocator::has_free(&store, set)? {
            return Err(CniError::new(
                code::PLUGIN_NOT_AVAILABLE,
                format!(
                    "host-local: range set {}-{} is exhausted",
                    set[0].start,
                    set[set.len() - 1].end
                ),
            ));
        }
    }
    Ok(())
}

fn gc(args: &Args) -> CniResult<()> {
    let conf = HostLocal::config(args)?;
    let v: serde_json::Value = cni::types::decode(&args.stdin, "GC configuration")?;
    let valid: Vec<Attachment> = match v.get(VALID_ATTACHMENTS) {
        None | Some(serde_json::Value::Null) => vec![],
        Some(list) => serde_json::from_value(list.clone())
            .map_err(|e| CniError::decode(format!("failed to decode {VALID_ATTACHMENTS}: {e}")))?,
    };
    let Some(mut store) = DiskStore::open_existing(&conf.data_dir, &conf.name)? else {
        return Ok(());
    };
    for r in store.reservations()? {
        if !valid.iter().any(|a| r.is_for(&a.container_id, &a.ifname)) {
            store.release(r.ip)?;
            failpoint!("host_local.gc.after_release");
        }
    }
    Ok(())
}
