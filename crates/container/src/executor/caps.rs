//! Credentials in the init: the capability bounding set, the user switch, the other
//! four capability sets, `no_new_privs`. The order matters:
//!
//! 1. drop from the bounding set what the spec's bounding set lacks (needs
//!    `CAP_SETPCAP`, which root still has);
//! 2. `PR_SET_KEEPCAPS`, then `setgroups`, `setgid`, `setuid` (a switch away from uid 0
//!    would otherwise empty the permitted set; it still empties the effective one);
//! 3. inheritable (while permitted is still full), effective, permitted (each
//!    `capset` must keep effective within permitted), then ambient, which needs each
//!    capability in both permitted and inheritable;
//! 4. `no_new_privs`.
//!
//! After `execve` a uid-0 process gets its bounding set as permitted and effective
//! (plus ambient), a non-root one only ambient: so the spec's sets behave as with runc.

use std::io;

use caps::{CapSet, CapsHashSet};

use super::channel::Step;
use super::init::{At, Fail};
use super::spec::Plan;

fn caps_err(e: caps::errors::CapsError) -> io::Error {
    // The caps crate keeps only a message; the errno is in its text.
    io::Error::other(e.to_string())
}

/// Step 1: the bounding set.
pub(crate) fn drop_bounding(p: &Plan) -> Result<(), Fail> {
    let Some(c) = &p.caps else {
        return Ok(());
    };
    for cap in caps::runtime::thread_all_supported() {
        if !c.bounding.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(caps_err)
                .at(Step::CapBounding, cap.to_string())?;
        }
    }
    Ok(())
}

fn set_keepcaps(on: bool) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, libc::c_ulong::from(on), 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Step 2: groups, gid, uid.
pub(crate) fn switch_user(p: &Plan) -> Result<(), Fail> {
    set_keepcaps(true).at(Step::Setuid, "keepcaps")?;
    let groups: Vec<libc::gid_t> = p.additional_gids.clone();
    // SAFETY: setgroups reads `groups.len()` gids from the vector.
    if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error()).at(Step::Setgroups, format!("{groups:?}"));
    }
    // SAFETY: plain id-setting syscalls.
    if unsafe { libc::setresgid(p.gid, p.gid, p.gid) } != 0 {
        return Err(io::Error::last_os_error()).at(Step::Setgid, p.gid.to_string());
    }
    // SAFETY: as setresgid: plain integers in, no memory touched.
    if unsafe { libc::setresuid(p.uid, p.uid, p.uid) } != 0 {
        return Err(io::Error::last_os_error()).at(Step::Setuid, p.uid.to_string());
    }
    set_keepcaps(false).at(Step::Setuid, "keepcaps")?;
    Ok(())
}

fn set(cset: CapSet, value: &CapsHashSet, name: &str) -> Result<(), Fail> {
    caps::set(None, cset, value)
        .map_err(caps_err)
        .at(Step::Capabilities, name)
}

/// Step 3: the other four sets.
pub(crate) fn apply(p: &Plan) -> Result<(), Fail> {
    let Some(c) = &p.caps else {
        return Ok(());
    };
    set(CapSet::Inheritable, &c.inheritable, "inheritable")?;
    set(CapSet::Effective, &c.effective, "effective")?;
    set(CapSet::Permitted, &c.permitted, "permitted")?;
    if caps::runtime::ambient_set_supported().is_ok() {
        caps::clear(None, CapSet::Ambient)
            .map_err(caps_err)
            .at(Step::Capabilities, "ambient")?;
        for &cap in &c.ambient {
            caps::raise(None, CapSet::Ambient, cap)
                .map_err(caps_err)
                .at(Step::Capabilities, format!("ambient {cap}"))?;
        }
    }
    Ok(())
}

/// Step 4.
pub(crate) fn no_new_privs(p: &Plan) -> Result<(), Fail> {
    if !p.no_new_privileges {
        return Ok(());
    }
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error()).at(Step::NoNewPrivs, "");
    }
    Ok(())
}
