//! Where host-local keeps its reservations. The disk layout is the reference plugin's,
//! so a node can switch between the two without losing a reservation:
//!
//! ```text
//! <dataDir>/<network>/lock                 flock(2)ed for every operation
//! <dataDir>/<network>/<ip>                 "<container id>\r\n<ifname>"
//! <dataDir>/<network>/last_reserved_ip.<N> the address last handed out from range set N
//! ```

use crate::failpoint::failpoint;
use cni::{CniError, CniResult};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Separator between container id and interface in a reservation file, as upstream writes it.
const LINE_BREAK: &str = "\r\n";
const LAST_RESERVED: &str = "last_reserved_ip.";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub ip: IpAddr,
    pub id: String,
    /// Empty for files written by old reference versions, which stored the id only.
    pub ifname: String,
}

impl Reservation {
    /// Whether this reservation belongs to the attachment (legacy files match any ifname).
    pub fn is_for(&self, id: &str, ifname: &str) -> bool {
        self.id == id && (self.ifname.is_empty() || self.ifname == ifname)
    }
}

/// The operations the allocator needs; the caller holds the lock for all of them.
pub trait Store {
    /// Claims `ip` for the attachment; false if someone holds it already.
    fn reserve(&mut self, id: &str, ifname: &str, ip: IpAddr, set: usize) -> CniResult<bool>;
    fn last_reserved(&self, set: usize) -> CniResult<Option<IpAddr>>;
    fn release(&mut self, ip: IpAddr) -> CniResult<()>;
    fn reservations(&self) -> CniResult<Vec<Reservation>>;
}

/// The on-disk store of one network, locked for as long as it lives.
pub struct DiskStore {
    dir: PathBuf,
    _lock: File,
}

impl DiskStore {
    /// Creates the network's folder if needed and takes its lock, waiting for other
    /// plugin processes: two concurrent ADDs never see the same free address.
    pub fn open(data_dir: &Path, network: &str) -> CniResult<DiskStore> {
        if network.is_empty() || network.contains('/') || network == "." || network == ".." {
            return Err(CniError::config(format!(
                "invalid network name {network:?} for host-local"
            )));
        }
        let dir = data_dir.join(network);
        std::fs::create_dir_all(&dir)
            .map_err(|e| CniError::io(format!("creating {}: {e}", dir.display())))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| CniError::io(format!("opening {}: {e}", lock_path.display())))?;
        loop {
            // SAFETY: flock on a descriptor we own; released when `lock` is closed.
            let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(CniError::io(format!(
                    "locking {}: {err}",
                    lock_path.display()
                )));
            }
        }
        Ok(DiskStore { dir, _lock: lock })
    }

    /// Opens the store only if the network's folder exists: DEL and GC must not create
    /// state for a network that never had any.
    pub fn open_existing(data_dir: &Path, network: &str) -> CniResult<Option<DiskStore>> {
        if !data_dir.join(network).is_dir() {
            return Ok(None);
        }
        Self::open(data_dir, network).map(Some)
    }

    fn ip_path(&self, ip: IpAddr) -> PathBuf {
        self.dir.join(ip.to_string())
    }
}

impl Store for DiskStore {
    fn reserve(&mut self, id: &str, ifname: &str, ip: IpAddr, set: usize) -> CniResult<bool> {
        let path = self.ip_path(ip);
        let mut f = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(CniError::io(format!("reserving {}: {e}", path.display()))),
        };
        failpoint!("host_local.add.after_create");
        if let Err(e) = f.write_all(format!("{id}{LINE_BREAK}{ifname}").as_bytes()) {
            let _ = std::fs::remove_file(&path);
            return Err(CniError::io(format!("writing {}: {e}", path.display())));
        }
        failpoint!("host_local.add.after_reserve");
        let last = self.dir.join(format!("{LAST_RESERVED}{set}"));
        std::fs::write(&last, ip.to_string()).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            CniError::io(format!("writing {}: {e}", last.display()))
        })?;
        failpoint!("host_local.add.after_last_reserved");
        Ok(true)
    }

    fn last_reserved(&self, set: usize) -> CniResult<Option<IpAddr>> {
        let path = self.dir.join(format!("{LAST_RESERVED}{set}"));
        // Bytes, not a string: a file that is not UTF-8 is no address (as the reference
        // plugin reads it), not an error that stops every allocation in the network.
        match std::fs::read(&path) {
            Ok(b) => Ok(String::from_utf8_lossy(&b).trim().parse().ok()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(CniError::io(format!("reading {}: {e}", path.display()))),
        }
    }

    fn release(&mut self, ip: IpAddr) -> CniResult<()> {
        let path = self.ip_path(ip);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CniError::io(format!("releasing {}: {e}", path.display()))),
        }
    }

    fn reservations(&self) -> CniResult<Vec<Reservation>> {
        let rd = std::fs::read_dir(&self.dir)
            .map_err(|e| CniError::io(format!("reading {}: {e}", self.dir.display())))?;
        let mut out = Vec::new();
        for entry in rd {
            let entry =
                entry.map_err(|e| CniError::io(format!("reading {}: {e}", self.dir.display())))?;
            let name = entry.file_name();
            let Some(ip) = name.to_str().and_then(|n| n.parse::<IpAddr>().ok()) else {
                continue;
            };
            // Read as bytes: one file that is not UTF-8 (written by hand, or by another
            // tool) must not fail every ADD, DEL and GC of the network; the reference
            // plugin takes its bytes as they are.
            let text = match std::fs::read(entry.path()) {
                Ok(t) => String::from_utf8_lossy(&t).into_owned(),
                // Released by nobody else (we hold the lock), but tolerate a racing manual cleanup.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(CniError::io(format!(
                        "reading {}: {e}",
                        entry.path().display()
                    )))
                }
            };
            let mut lines = text.split(['\r', '\n']).filter(|l| !l.is_empty());
            let id = lines.next().unwrap_or("").trim().to_string();
            let ifname = lines.next().unwrap_or("").trim().to_string();
            out.push(Reservation { ip, id, ifname });
        }
        Ok(out)
    }
}

/// An in-memory store for unit tests of the allocator.
#[derive(Default)]
pub struct MemStore {
    pub held: BTreeMap<IpAddr, (String, String)>,
    pub last: BTreeMap<usize, IpAddr>,
}

impl Store for MemStore {
    fn reserve(&mut self, id: &str, ifname: &str, ip: IpAddr, set: usize) -> CniResult<bool> {
        if self.held.contains_key(&ip) {
            return Ok(false);
        }
        self.held.insert(ip, (id.to_string(), ifname.to_string()));
        self.last.insert(set, ip);
        Ok(true)
    }
    fn last_reserved(&self, set: usize) -> CniResult<Option<IpAddr>> {
        Ok(self.last.get(&set).copied())
    }
    fn release(&mut self, ip: IpAddr) -> CniResult<()> {
        self.held.remove(&ip);
        Ok(())
    }
    fn reservations(&self) -> CniResult<Vec<Reservation>> {
        Ok(self
            .held
            .iter()
            .map(|(ip, (id, ifname))| Reservation {
                ip: *ip,
                id: id.clone(),
                ifname: ifname.clone(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_layout_matches_the_reference() {
        let d = std::env::temp_dir().join(format!("hl-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        {
            let mut s = DiskStore::open(&d, "net").unwrap();
            let ip: IpAddr = "10.0.0.2".parse().unwrap();
            assert!(s.reserve("c1", "eth0", ip, 0).unwrap());
            assert!(!s.reserve("c2", "eth0", ip, 0).unwrap());
            assert_eq!(
                std::fs::read_to_string(d.join("net/10.0.0.2")).unwrap(),
                "c1\r\neth0"
            );
            assert_eq!(
                std::fs::read_to_string(d.join("net/last_reserved_ip.0")).unwrap(),
                "10.0.0.2"
            );
            assert!(d.join("net/lock").exists());
            std::fs::write(d.join("net/10.0.0.3"), "legacy").unwrap();
            let mut r = s.reservations().unwrap();
            r.sort_by_key(|r| r.ip);
            assert_eq!(
                r[0],
                Reservation {
                    ip,
                    id: "c1".into(),
                    ifname: "eth0".into()
                }
            );
            assert!(r[1].is_for("legacy", "anything"));
            assert_eq!(s.last_reserved(0).unwrap(), Some(ip));
            assert_eq!(s.last_reserved(1).unwrap(), None);
            s.release(ip).unwrap();
            s.release(ip).unwrap();
            assert!(!d.join("net/10.0.0.2").exists());
        }
        assert!(DiskStore::open(&d, "../x").is_err());
        assert!(DiskStore::open_existing(&d, "other").unwrap().is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Found by fuzz/ (host_local_store): a reservation or `last_reserved_ip` file that
    /// is not UTF-8 made `reservations` and `last_reserved` fail, and with them every
    /// ADD, DEL and GC of the network.
    #[test]
    fn files_that_are_not_utf8_are_read_not_refused() {
        let d = std::env::temp_dir().join(format!("hl-store-utf8-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let s = DiskStore::open(&d, "net").unwrap();
        let bytes = b"abc1\xce\xcc\xf2\xf5\x9a\x8b\x97\xc8\r\neth\xff0";
        std::fs::write(d.join("net/10.1.2.3"), bytes).unwrap();
        std::fs::write(d.join("net/last_reserved_ip.0"), bytes).unwrap();
        let r = s.reservations().unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].id.starts_with("abc1"));
        assert_eq!(s.last_reserved(0).unwrap(), None);
        std::fs::write(d.join("net/last_reserved_ip.0"), b"10.1.2.3\n\xff").unwrap();
        assert_eq!(s.last_reserved(0).unwrap(), None);
        drop(s);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
