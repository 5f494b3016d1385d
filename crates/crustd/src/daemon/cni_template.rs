//! `cni.conf_template`: the CNI config rendered with the Node's pod ranges when the
//! kubelet sends them (UpdateRuntimeConfig).
//!
//! containerd renders its `conf_template` as a Go `text/template` with three fields:
//! `.PodCIDR` (the first range), `.PodCIDRRanges` (every range) and `.Routes` (a default
//! route per family: `0.0.0.0/0`, `::/0`), so the templates operators have use Go's
//! `range` and `if` over those lists:
//!
//! ```text
//! "ranges": [{{range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}],
//! "routes": [{{range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst": "{{$route}}"}{{end}}]
//! ```
//!
//! This renders that subset of the template language: text; `{{.PodCIDR}}`; `range`
//! over `.PodCIDRRanges` or `.Routes` (`range .X`, `range $v := .X`, `range $i, $v :=
//! .X`) with `{{.}}`, `{{$v}}` and `{{$i}}` inside; `if`/`else` on a variable, `.` or a
//! field (Go's truth: a non-zero index, a non-empty string or list); `end`; comments;
//! and the `{{-`/`-}}` whitespace trims. Anything else is an error naming it, not a
//! silently wrong config. crust's earlier shorthand stays: `{{.PodCIDRRanges}}` and
//! `{{.Routes}}` outside a `range` stand for the JSON of host-local range sets and of
//! routes (Go would print `[10.244.1.0/24]`, which no JSON reader takes).

/// The template's data.
struct Data<'a> {
    cidrs: &'a [&'a str],
    routes: Vec<&'static str>,
}

/// A value in scope: a string, an index, or a list.
#[derive(Clone, Copy)]
enum Value<'a> {
    Str(&'a str),
    Int(usize),
    List(&'a [&'a str]),
}

impl Value<'_> {
    fn truthy(self) -> bool {
        match self {
            Value::Str(s) => !s.is_empty(),
            Value::Int(i) => i != 0,
            Value::List(l) => !l.is_empty(),
        }
    }
}

/// A parsed template.
#[derive(Debug, PartialEq)]
enum Node {
    Text(String),
    /// `{{X}}`: a value printed.
    Print(String),
    Range {
        index: Option<String>,
        value: Option<String>,
        list: String,
        body: Vec<Node>,
    },
    If {
        cond: String,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

/// The default route of each family among `cidrs`, in their order (containerd's).
fn routes(cidrs: &[&str]) -> Vec<&'static str> {
    let mut v = vec![];
    for c in cidrs {
        let r = if c.contains(':') { "::/0" } else { "0.0.0.0/0" };
        if !v.contains(&r) {
            v.push(r);
        }
    }
    v
}

/// Renders `template` with the pod ranges `cidrs` (at least one).
pub fn render(template: &str, cidrs: &[&str]) -> Result<String, String> {
    let nodes = parse(template)?;
    let routes = routes(cidrs);
    let data = Data { cidrs, routes };
    let mut out = String::new();
    let mut vars: Vec<(String, Value<'_>)> = vec![];
    exec(&nodes, &data, None, &mut vars, &mut out)?;
    Ok(out)
}

/// The template as text and actions, whitespace trims applied.
fn lex(template: &str) -> Result<Vec<(bool, String)>, String> {
    let mut items: Vec<(bool, String)> = vec![];
    let mut rest = template;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = &rest[..start];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed action at {:?}", snippet(&rest[start..])))?;
        let mut action = &after[..end];
        if let Some(a) = action.strip_prefix('-') {
            if a.starts_with([' ', '\t', '\n', '\r']) {
                text = text.trim_end();
                action = a;
            }
        }
        trim_next = false;
        if let Some(a) = action.strip_suffix('-') {
            if a.ends_with([' ', '\t', '\n', '\r']) {
                trim_next = true;
                action = a;
            }
        }
        if !text.is_empty() {
            items.push((false, text.to_string()));
        }
        items.push((true, action.trim().to_string()));
        rest = &after[end + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    if !text.is_empty() {
        items.push((false, text.to_string()));
    }
    Ok(items)
}

fn snippet(s: &str) -> String {
    s.chars().take(40).collect()
}

fn parse(template: &str) -> Result<Vec<Node>, String> {
    let items = lex(template)?;
    let mut pos = 0;
    let (nodes, stop) = parse_list(&items, &mut pos)?;
    match stop {
        None => Ok(nodes),
        Some(s) => Err(format!("{{{{{s}}}}} without a range or if")),
    }
}

/// Parses until `end`/`else` (returned) or the end of the items (None).
fn parse_list(
    items: &[(bool, String)],
    pos: &mut usize,
) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = vec![];
    while *pos < items.len() {
        let (is_action, s) = &items[*pos];
        *pos += 1;
        if !is_action {
            nodes.push(Node::Text(s.clone()));
            continue;
        }
        if s.starts_with("/*") && s.ends_with("*/") {
            continue;
        }
        if s == "end" || s == "else" {
            return Ok((nodes, Some(s.clone())));
        }
        if let Some(spec) = s.strip_prefix("range ") {
            let (index, value, list) = parse_range(spec.trim())?;
            let (body, stop) = parse_list(items, pos)?;
            match stop.as_deref() {
                Some("end") => {}
                Some("else") => return Err("{{else}} in a range is not supported".into()),
                _ => return Err(format!("{{{{range {spec}}}}} without {{{{end}}}}")),
            }
            nodes.push(Node::Range {
                index,
                value,
                list,
                body,
            });
            continue;
        }
        if let Some(cond) = s.strip_prefix("if ") {
            let cond = cond.trim().to_string();
            let (then, stop) = parse_list(items, pos)?;
            let otherwise = match stop.as_deref() {
                Some("end") => vec![],
                Some("else") => {
                    let (otherwise, stop) = parse_list(items, pos)?;
                    if stop.as_deref() != Some("end") {
                        return Err(format!("{{{{if {cond}}}}} without {{{{end}}}}"));
                    }
                    otherwise
                }
                _ => return Err(format!("{{{{if {cond}}}}} without {{{{end}}}}")),
            };
            nodes.push(Node::If {
                cond,
                then,
                otherwise,
            });
            continue;
        }
        nodes.push(Node::Print(s.clone()));
    }
    Ok((nodes, None))
}

/// `.X`, `$v := .X` or `$i, $v := .X`.
fn parse_range(spec: &str) -> Result<(Option<String>, Option<String>, String), String> {
    let Some((vars, list)) = spec.split_once(":=") else {
        return Ok((None, None, spec.to_string()));
    };
    let names: Vec<&str> = vars.split(',').map(str::trim).collect();
    let var = |n: &str| -> Result<String, String> {
        if n.len() > 1 && n.starts_with('$') {
            Ok(n.to_string())
        } else {
            Err(format!("range variable {n:?} is not a $name"))
        }
    };
    let (index, value) = match names.as_slice() {
        [v] => (None, Some(var(v)?)),
        [i, v] => (Some(var(i)?), Some(var(v)?)),
        _ => return Err(format!("range {spec:?}: one or two variables")),
    };
    Ok((index, value, list.trim().to_string()))
}

/// The value of `name` in scope: `.` (the range's element), `$var`, or a field.
fn lookup<'a>(
    name: &str,
    data: &'a Data<'a>,
    dot: Option<Value<'a>>,
    vars: &[(String, Value<'a>)],
) -> Result<Value<'a>, String> {
    match name {
        "." => dot.ok_or_else(|| "{{.}} outside a range".to_string()),
        ".PodCIDR" => Ok(Value::Str(data.cidrs.first().copied().unwrap_or(""))),
        ".PodCIDRRanges" => Ok(Value::List(data.cidrs)),
        ".Routes" => Ok(Value::List(&data.routes)),
        v if v.starts_with('$') => vars
            .iter()
            .rev()
            .find(|(n, _)| n == v)
            .map(|(_, val)| *val)
            .ok_or_else(|| format!("undefined variable {v}")),
        other => Err(format!(
            "{{{{{other}}}}}: not a field of the template's data (.PodCIDR, .PodCIDRRanges, .Routes)"
        )),
    }
}

fn exec<'a>(
    nodes: &[Node],
    data: &'a Data<'a>,
    dot: Option<Value<'a>>,
    vars: &mut Vec<(String, Value<'a>)>,
    out: &mut String,
) -> Result<(), String> {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Print(name) => match lookup(name, data, dot, vars)? {
                Value::Str(s) => out.push_str(s),
                Value::Int(i) => out.push_str(&i.to_string()),
                // crust's shorthand: the list as JSON for host-local and the bridge.
                Value::List(_) if name == ".PodCIDRRanges" => {
                    let sets: Vec<String> = data
                        .cidrs
                        .iter()
                        .map(|c| format!("[{{\"subnet\": \"{c}\"}}]"))
                        .collect();
                    out.push_str(&sets.join(", "));
                }
                Value::List(_) if name == ".Routes" => {
                    let routes: Vec<String> = data
                        .routes
                        .iter()
                        .map(|r| format!("{{\"dst\": \"{r}\"}}"))
                        .collect();
                    out.push_str(&routes.join(", "));
                }
                Value::List(_) => return Err(format!("{{{{{name}}}}} is a list: range over it")),
            },
            Node::Range {
                index,
                value,
                list,
                body,
            } => {
                let Value::List(items) = lookup(list, data, dot, vars)? else {
                    return Err(format!("range over {list}, which is not a list"));
                };
                for (i, item) in items.iter().enumerate() {
                    let depth = vars.len();
                    if let Some(ix) = index {
                        vars.push((ix.clone(), Value::Int(i)));
                    }
                    if let Some(v) = value {
                        vars.push((v.clone(), Value::Str(item)));
                    }
                    let r = exec(body, data, Some(Value::Str(item)), vars, out);
                    vars.truncate(depth);
                    r?;
                }
            }
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                let branch = if lookup(cond, data, dot, vars)?.truthy() {
                    then
                } else {
                    otherwise
                };
                exec(branch, data, dot, vars, out)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// containerd's documented template for the bridge plugin, as operators have it.
    const CONTAINERD_STYLE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "containerd-net",
  "plugins": [{
    "type": "bridge",
    "ipam": {
      "type": "host-local",
      "ranges": [
        {{- range $i, $range := .PodCIDRRanges}}{{if $i}}, {{end}}[{"subnet": "{{$range}}"}]{{end}}
      ],
      "routes": [
        {{- range $i, $route := .Routes}}{{if $i}}, {{end}}{"dst": "{{$route}}"}{{end}}
      ]
    }
  }],
  "first": "{{.PodCIDR}}"
}"#;

    fn json(t: &str, cidrs: &[&str]) -> serde_json::Value {
        let out = render(t, cidrs).unwrap();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    #[test]
    fn containerds_template_single_and_dual_stack() {
        let v = json(CONTAINERD_STYLE, &["10.244.1.0/24"]);
        let ipam = &v["plugins"][0]["ipam"];
        assert_eq!(
            ipam["ranges"],
            serde_json::json!([[{"subnet": "10.244.1.0/24"}]])
        );
        assert_eq!(ipam["routes"], serde_json::json!([{"dst": "0.0.0.0/0"}]));
        assert_eq!(v["first"], "10.244.1.0/24");
        let v = json(CONTAINERD_STYLE, &["10.244.1.0/24", "fd00:1::/64"]);
        let ipam = &v["plugins"][0]["ipam"];
        assert_eq!(
            ipam["ranges"],
            serde_json::json!([[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/64"}]])
        );
        assert_eq!(
            ipam["routes"],
            serde_json::json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
    }

    #[test]
    fn crusts_shorthand_renders_json() {
        let t = r#"{"ipam":{"ranges":[{{.PodCIDRRanges}}],"routes":[{{.Routes}}]},"first":"{{.PodCIDR}}"}"#;
        let v = json(t, &["10.244.1.0/24", "fd00:1::/64"]);
        assert_eq!(v["first"], "10.244.1.0/24");
        assert_eq!(v["ipam"]["ranges"][1][0]["subnet"], "fd00:1::/64");
        assert_eq!(v["ipam"]["routes"][1]["dst"], "::/0");
    }

    #[test]
    fn dot_else_trims_and_comments() {
        let t = "{{/* a comment */}}a {{- range .Routes}} <{{.}}> {{- end}} | {{if .PodCIDR}}yes{{else}}no{{end}}|{{range $r := .PodCIDRRanges -}}   {{$r}}{{end}}";
        assert_eq!(
            render(t, &["10.0.0.0/24"]).unwrap(),
            "a <0.0.0.0/0> | yes|10.0.0.0/24"
        );
    }

    #[test]
    fn routes_one_per_family_in_the_ranges_order() {
        assert_eq!(
            routes(&["fd00::/64", "10.0.0.0/24", "10.1.0.0/24"]),
            ["::/0", "0.0.0.0/0"]
        );
    }

    #[test]
    fn what_it_cannot_render_is_an_error_naming_it() {
        for (t, want) in [
            ("{{.Nope}}", ".Nope"),
            ("{{range .PodCIDRRanges}}x", "without {{end}}"),
            ("{{end}}", "without a range or if"),
            ("{{$x}}", "undefined variable $x"),
            ("{{ .PodCIDR", "unclosed action"),
            ("{{.Routes | printf}}", ".Routes | printf"),
            ("{{range .PodCIDR}}{{end}}", "not a list"),
            (
                "{{range $i, $v, $w := .Routes}}{{end}}",
                "one or two variables",
            ),
        ] {
            let e = render(t, &["10.0.0.0/24"]).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
    }
}
