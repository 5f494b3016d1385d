// The bridge tests' node, namespaces and what-is-left checks, shared by bridge.rs and
// cni_crash.rs beside it through `include!` (each brings its own `use`s).

/// The network name: host-local's folder under `dataDir`, and part of the masq comments.
const NET: &str = "brnet";
/// The tools the tests run in the namespaces they make.
const TOOLS: &[&str] = &["ip", "nft", "ping", "bridge", "iptables", "ip6tables"];
/// How long a condition the kernel reaches asynchronously (IPv6 neighbours, a namespace's
/// interfaces going away after it is deleted) may take.
const SETTLE: Duration = Duration::from_secs(3);

fn root() -> bool {
    require_root(TOOLS)
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A node: its network namespace, host-local's dataDir, the bridge's name and the
/// plugin that runs there with its CNI_PATH.
struct Node {
    ns: Netns,
    data: TempDir,
    bridge: String,
    plugin: PathBuf,
    cni_path: PathBuf,
}

impl Node {
    /// A node running our bridge, which finds our host-local in the build dir.
    fn ours() -> Node {
        Node::with(bin("bridge"), bin_dir(), unique("br"))
    }

    fn with(plugin: PathBuf, cni_path: PathBuf, bridge: String) -> Node {
        assert!(bridge.len() <= 15, "bridge name {bridge} too long");
        Node {
            ns: Netns::new("bn"),
            data: TempDir::new("br"),
            bridge,
            plugin,
            cni_path,
        }
    }

    /// A configuration of this node's network: `bridge` holds the bridge plugin's
    /// settings; `ipam` gets `type` host-local (unless given) and this node's dataDir.
    fn conf(&self, version: &str, bridge: Value, mut ipam: Value) -> Value {
        let mut c =
            json!({"cniVersion": version, "name": NET, "type": "bridge", "bridge": self.bridge});
        for (k, v) in bridge.as_object().expect("bridge settings object") {
            c[k] = v.clone();
        }
        if ipam.get("type").is_none() {
            ipam["type"] = json!("host-local");
        }
        ipam["dataDir"] = json!(self.data.path());
        c["ipam"] = ipam;
        c
    }

    /// Runs the plugin in the node namespace for one attachment.
    fn call_raw(&self, cmd: &str, conf: &str, id: &str, netns: &str, ifname: &str) -> CniOut {
        attachment_env(
            Cni::new(self.plugin.clone(), Some(&self.ns)),
            id,
            netns,
            ifname,
            &self.cni_path,
        )
        .call(cmd, conf)
    }

    fn call(&self, cmd: &str, conf: &Value, id: &str, pod: &Netns) -> CniOut {
        self.call_raw(cmd, &conf.to_string(), id, &netns_path(pod), "eth0")
    }

    /// ADD of `id` with `eth0` in `pod`, which must succeed; returns the result.
    fn add(&self, conf: &Value, id: &str, pod: &Netns) -> Value {
        self.call("ADD", conf, id, pod).ok()
    }

    /// DEL with this CNI_NETNS, which must succeed and print nothing.
    fn del_at(&self, conf: &Value, id: &str, netns: &str) {
        let out = self.call_raw("DEL", &conf.to_string(), id, netns, "eth0");
        assert!(out.stdout.trim().is_empty(), "DEL printed {}", out.stdout);
        out.ok();
    }

    fn del(&self, conf: &Value, id: &str, pod: &Netns) {
        self.del_at(conf, id, &netns_path(pod));
    }

    /// A verb without attachment (STATUS, GC).
    fn call_plain(&self, cmd: &str, conf: &Value) -> CniOut {
        Cni::new(self.plugin.clone(), Some(&self.ns))
            .env("CNI_PATH", self.cni_path.to_string_lossy())
            .call(cmd, &conf.to_string())
    }

    /// Names of the veths in the node namespace.
    fn veths(&self) -> Vec<String> {
        names(&self.ns.ip_json(&["link", "show", "type", "veth"]))
    }

    /// The one host veth of the node; panics unless there is exactly one.
    fn the_veth(&self) -> String {
        let v = self.veths();
        assert_eq!(v.len(), 1, "expected one veth in the node: {v:?}");
        v[0].clone()
    }

    /// host-local's reservations (files named by address).
    fn reservations(&self) -> Vec<String> {
        ip_files(self.data.path(), NET)
    }

    /// host-local's folder: every file with its content.
    fn files(&self) -> BTreeMap<String, String> {
        files(self.data.path())
    }

    /// The masquerade rules of our nftables backend, one line each (with the comment).
    fn nft_rules(&self) -> Vec<String> {
        let out =
            run(self
                .ns
                .cmd("nft")
                .args(["list", "chain", "inet", "crust_cni", "postrouting"]));
        if !out.status.success() {
            return vec![]; // no table or chain: no rules
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("comment"))
            .map(|l| l.trim().to_string())
            .collect()
    }

    /// `iptables -t nat -S` and `ip6tables -t nat -S` lines that mention a CNI chain,
    /// each prefixed with the tool.
    fn ipt_rules(&self) -> Vec<String> {
        let mut v = Vec::new();
        for tool in ["iptables", "ip6tables"] {
            for l in self.ns.sh(&[tool, "-w", "-t", "nat", "-S"]).lines() {
                if l.contains("CNI-") {
                    v.push(format!("{tool} {l}"));
                }
            }
        }
        v
    }

    /// Reads a sysctl of the node namespace, e.g. `net/ipv4/ip_forward`.
    fn sysctl(&self, key: &str) -> String {
        self.ns
            .sh(&["cat", &format!("/proc/sys/{key}")])
            .trim()
            .to_string()
    }

    fn set_sysctl(&self, key: &str, value: &str) {
        self.ns
            .sh(&["sh", "-c", &format!("echo {value} > /proc/sys/{key}")]);
    }
}

fn netns_path(ns: &Netns) -> String {
    ns.path().to_string_lossy().into_owned()
}

/// Every file of host-local's network folder under `data_dir` with its content.
fn files(data_dir: &Path) -> BTreeMap<String, String> {
    let Ok(rd) = std::fs::read_dir(data_dir.join(NET)) else {
        return BTreeMap::new();
    };
    rd.map(|e| {
        let e = e.unwrap();
        (
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read_to_string(e.path()).unwrap_or_default(),
        )
    })
    .collect()
}

/// Every path under `dir`, recursively.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.insert(p.clone());
            if p.is_dir() {
                out.extend(tree(&p));
            }
        }
    }
    out
}

fn names(links: &Value) -> Vec<String> {
    links
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

/// `ip -j -d link show dev NAME`.
fn link(ns: &Netns, dev: &str) -> Value {
    ns.ip_json(&["-d", "link", "show", "dev", dev])[0].clone()
}

fn has_link(ns: &Netns, dev: &str) -> bool {
    ns.links().iter().any(|l| l == dev)
}

fn is_up(link: &Value) -> bool {
    link["flags"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str() == Some("UP"))
}

/// The global (not link-local) addresses of `dev` as "local/prefixlen", in kernel order.
fn addrs(ns: &Netns, dev: &str) -> Vec<String> {
    ns.ip_json(&["addr", "show", "dev", dev])[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"].as_str() != Some("link"))
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect()
}

/// The routes of one family in `ns` (`ip -j route` / `ip -6 -j route`), reduced to
/// dst/gateway/dev/protocol/scope/prefsrc/metric; IPv6 link-local (fe80::/64) and
/// multicast routes are left out.
fn routes(ns: &Netns, v6: bool) -> Vec<Value> {
    let args: &[&str] = if v6 { &["-6", "route"] } else { &["route"] };
    ns.ip_json(args)
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            let dst = r["dst"].as_str().unwrap_or("");
            !dst.starts_with("fe80:") && !dst.starts_with("ff00:")
        })
        .map(|r| {
            let mut o = serde_json::Map::new();
            for k in [
                "dst", "gateway", "dev", "protocol", "scope", "prefsrc", "metric",
            ] {
                if let Some(v) = r.get(k) {
                    o.insert(k.to_string(), v.clone());
                }
            }
            Value::Object(o)
        })
        .collect()
}

/// The route to `dst` ("default" for the default route) in `ns`, if any.
fn route(ns: &Netns, v6: bool, dst: &str) -> Option<Value> {
    routes(ns, v6).into_iter().find(|r| r["dst"] == dst)
}

/// Polls `f` until it holds, for at most `SETTLE`.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETTLE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping_once(from: &Netns, to: &str) -> bool {
    from.ok(&["ping", "-n", "-q", "-c", "1", "-W", "1", to])
}

/// `from` pings `to`; retried for up to `SETTLE` (a fresh IPv6 neighbour may need it).
fn ping(from: &Netns, to: &str) {
    let deadline = Instant::now() + SETTLE;
    while !ping_once(from, to) {
        assert!(Instant::now() < deadline, "{} cannot ping {to}", from.name);
    }
}

/// IPAM with one IPv4 and one IPv6 range set: 10.N.0.0/24 and fd00:N::/64.
fn dual(n: u32) -> Value {
    json!({"ranges": [
        [{"subnet": format!("10.{n}.0.0/24")}],
        [{"subnet": format!("fd00:{n}::/64")}],
    ]})
}

/// The address part of each `ips` entry of a result.
fn result_ips(r: &Value) -> Vec<String> {
    r["ips"]
        .as_array()
        .unwrap_or_else(|| panic!("result without ips: {r}"))
        .iter()
        .map(|i| {
            let a = i["address"].as_str().unwrap();
            a.split('/').next().unwrap().to_string()
        })
        .collect()
}

/// What a refused ADD must leave unchanged.
#[derive(Debug, PartialEq)]
struct State {
    node_links: Vec<String>,
    pod_links: Vec<String>,
    data: BTreeSet<PathBuf>,
    reservations: Vec<String>,
    nft: Vec<String>,
    ipt: Vec<String>,
}

fn state(node: &Node, pod: &Netns) -> State {
    State {
        node_links: node.ns.links(),
        pod_links: pod.links(),
        data: tree(node.data.path()),
        reservations: node.reservations(),
        nft: node.nft_rules(),
        ipt: node.ipt_rules(),
    }
}

/// What a refused ADD may leave besides nothing.
#[derive(Clone, Copy, Default)]
struct Allow {
    /// The bridge it created before failing (shared by every pod; the reference leaves
    /// it too).
    bridge: bool,
    /// host-local's `lock` and `last_reserved_ip.N`, but no reservation: our plugin runs
    /// IPAM beside the link setup, so a link failure comes after host-local allocated
    /// (then released) an address. The reference runs IPAM only after the links are set
    /// up, and leaves no file here; ours moves the round-robin on (the next pod gets the
    /// address after the one it would have got). A known difference, tolerated here
    /// only where it occurs (link failures after IPAM started).
    ipam_bookkeeping: bool,
}

/// Asserts that a refused ADD left `after` as `before`, but for what `allow` permits.
fn assert_left_nothing(node: &Node, before: &State, mut after: State, allow: Allow) {
    if allow.bridge {
        after.node_links.retain(|l| *l != node.bridge);
    }
    if allow.ipam_bookkeeping {
        let net = node.data.path().join(NET);
        after.data.retain(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            let bookkeeping = *p == net
                || p.parent() == Some(net.as_path())
                    && (name == "lock" || name.starts_with("last_reserved_ip."));
            before.data.contains(p) || !bookkeeping
        });
    }
    assert_eq!(&after, before, "a refused ADD left something behind");
}

/// An "outside" namespace behind the node: a veth pair node `up0` 192.168.N.1/24 -
/// outside `up1` 192.168.N.2/24, and no route back to the pods' subnet, so a pod's ping
/// to 192.168.N.2 only gets an answer when the node masquerades it.
fn outside(node: &Node, n: u32) -> Netns {
    let ext = Netns::new("bx");
    node.ns.sh(&[
        "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1", "netns", &ext.name,
    ]);
    node.ns.sh(&[
        "ip",
        "addr",
        "add",
        &format!("192.168.{n}.1/24"),
        "dev",
        "up0",
    ]);
    node.ns.sh(&["ip", "link", "set", "up0", "up"]);
    ext.sh(&[
        "ip",
        "addr",
        "add",
        &format!("192.168.{n}.2/24"),
        "dev",
        "up1",
    ]);
    ext.sh(&["ip", "link", "set", "up1", "up"]);
    ext
}
