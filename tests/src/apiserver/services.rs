//! Service defaults, ClusterIP / nodePort allocation and the Service validation rules FerroLB relies on
//! (IPv4-only cluster, `loadBalancerClass` immutability, `ipMode` checks). Pure: works on a snapshot.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};

use serde_json::{Value, json};

use super::error::Cause;
use super::state::ClusterConfig;

/// The cluster IPs and node ports one Service holds.
fn claims(s: &Value) -> (Vec<String>, Vec<i64>) {
    let mut ips = Vec::new();
    if let Some(ip) = s.pointer("/spec/clusterIP").and_then(Value::as_str) {
        ips.push(ip.to_string());
    }
    // A dual-stack Service holds one address per family.
    for ip in s
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !ips.iter().any(|i| i == ip) {
            ips.push(ip.to_string());
        }
    }
    let mut ports: Vec<i64> = s
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
        .collect();
    if let Some(n) = s
        .pointer("/spec/healthCheckNodePort")
        .and_then(Value::as_i64)
    {
        ports.push(n);
    }
    (ips, ports)
}

/// What every stored Service holds, counted, kept current by the store on each write.
#[derive(Debug, Default, Clone)]
pub struct ServiceIndex {
    ips: HashMap<String, u32>,
    ports: HashMap<i64, u32>,
}

impl ServiceIndex {
    /// Counts what `svc` holds.
    pub fn add(&mut self, svc: &Value) {
        let (ips, ports) = claims(svc);
        for ip in ips {
            *self.ips.entry(ip).or_default() += 1;
        }
        for p in ports {
            *self.ports.entry(p).or_default() += 1;
        }
    }

    /// Forgets what `svc` held.
    pub fn remove(&mut self, svc: &Value) {
        let (ips, ports) = claims(svc);
        for ip in ips {
            if let Some(n) = self.ips.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.ips.remove(&ip);
                }
            }
        }
        for p in ports {
            if let Some(n) = self.ports.get_mut(&p) {
                *n -= 1;
                if *n == 0 {
                    self.ports.remove(&p);
                }
            }
        }
    }
}

/// Addresses and ports already taken by other Services: those of an index less the ones of
/// the Service being written, plus what this write allocated so far.
#[derive(Debug, Default)]
pub struct Taken<'a> {
    index: Option<&'a ServiceIndex>,
    mine: (HashSet<String>, HashSet<i64>),
    /// Cluster IPs taken (besides the index's).
    pub ips: HashSet<String>,
    /// Node ports (and health-check node ports) taken (besides the index's).
    pub ports: HashSet<i64>,
}

impl<'a> Taken<'a> {
    /// What the Services of `index` hold, less what `me` (the stored version of the Service
    /// being written) holds.
    pub fn except(index: &'a ServiceIndex, me: Option<&Value>) -> Self {
        let (ips, ports) = me.map(claims).unwrap_or_default();
        Self {
            index: Some(index),
            mine: (ips.into_iter().collect(), ports.into_iter().collect()),
            ..Self::default()
        }
    }

    /// Collects what `services` use.
    pub fn from_services<'v>(services: impl Iterator<Item = &'v Value>) -> Self {
        let mut t = Taken::default();
        for s in services {
            let (ips, ports) = claims(s);
            t.ips.extend(ips);
            t.ports.extend(ports);
        }
        t
    }

    fn ip_taken(&self, ip: &str) -> bool {
        self.ips.contains(ip)
            || self.index.is_some_and(|i| {
                let n = i.ips.get(ip).copied().unwrap_or(0);
                n > u32::from(self.mine.0.contains(ip))
            })
    }

    fn port_taken(&self, p: i64) -> bool {
        self.ports.contains(&p)
            || self.index.is_some_and(|i| {
                let n = i.ports.get(&p).copied().unwrap_or(0);
                n > u32::from(self.mine.1.contains(&p))
            })
    }

    fn cluster_ip(&mut self, cfg: &ClusterConfig) -> Option<String> {
        let base = u32::from(cfg.service_cidr_base);
        // .0 is the network, .1 the kubernetes Service, .255 broadcast; start at a random offset.
        let start: u32 = rand::random_range(2..255);
        (0..253u32)
            .map(|i| 2 + (start - 2 + i) % 253)
            .map(|host| Ipv4Addr::from(base + host).to_string())
            .find(|ip| !self.ip_taken(ip))
            .inspect(|ip| {
                self.ips.insert(ip.clone());
            })
    }

    fn cluster_ip_v6(&mut self, cfg: &ClusterConfig) -> Option<String> {
        let base = u128::from(cfg.service_cidr_v6?);
        let start: u128 = rand::random_range(2..65535);
        (0..65533u128)
            .map(|i| 2 + (start - 2 + i) % 65533)
            .map(|host| std::net::Ipv6Addr::from(base + host).to_string())
            .find(|ip| !self.ip_taken(ip))
            .inspect(|ip| {
                self.ips.insert(ip.clone());
            })
    }

    fn node_port(&mut self, cfg: &ClusterConfig) -> Option<i64> {
        let (lo, hi) = (
            i64::from(cfg.node_port_range.0),
            i64::from(cfg.node_port_range.1),
        );
        let span = hi - lo + 1;
        let start = rand::random_range(0..span);
        (0..span)
            .map(|i| lo + (start + i) % span)
            .find(|p| !self.port_taken(*p))
            .inspect(|p| {
                self.ports.insert(*p);
            })
    }
}

fn spec_str<'a>(svc: &'a Value, f: &str) -> Option<&'a str> {
    svc.pointer(&format!("/spec/{f}")).and_then(Value::as_str)
}

fn ctype(svc: &Value) -> &str {
    spec_str(svc, "type").unwrap_or("ClusterIP")
}

fn dns1035(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-'
}

/// Fills defaults and allocations on create (`old` is `None`) or update, then validates.
pub fn prepare(
    svc: &mut Value,
    old: Option<&Value>,
    taken: &mut Taken,
    cfg: &ClusterConfig,
) -> Vec<Cause> {
    let mut errs = Vec::new();
    if !svc.get("spec").is_some_and(Value::is_object) {
        svc["spec"] = json!({});
    }
    if old.is_none() {
        let name = svc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !dns1035(name) {
            errs.push(Cause::new("FieldValueInvalid", format!("Invalid value: {name:?}: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"), Some("metadata.name".into())));
        }
    }
    let spec = &mut svc["spec"];
    if spec.get("type").is_none() {
        spec["type"] = json!("ClusterIP");
    }
    let ty = spec["type"].as_str().unwrap_or("").to_string();
    let lb = ty == "LoadBalancer";
    let uses_node_ports = lb || ty == "NodePort";
    if spec.get("sessionAffinity").is_none() {
        spec["sessionAffinity"] = json!("None");
    }
    if spec["sessionAffinity"] == "ClientIP" {
        if spec.get("sessionAffinityConfig").is_none() {
            spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
        }
    } else if let Some(o) = spec.as_object_mut() {
        o.remove("sessionAffinityConfig");
    }
    if spec.get("internalTrafficPolicy").is_none() && ty != "ExternalName" {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    if uses_node_ports {
        if spec.get("externalTrafficPolicy").is_none() {
            spec["externalTrafficPolicy"] = json!("Cluster");
        }
    } else if let Some(o) = spec.as_object_mut() {
        o.remove("externalTrafficPolicy");
        o.remove("healthCheckNodePort");
        o.remove("allocateLoadBalancerNodePorts");
    }
    if lb && spec.get("allocateLoadBalancerNodePorts").is_none() {
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
    // IP families: this cluster is IPv4 only.
    let policy = spec
        .get("ipFamilyPolicy")
        .and_then(Value::as_str)
        .unwrap_or("SingleStack")
        .to_string();
    let families: Vec<String> = spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if ty != "ExternalName" && cfg.service_cidr_v6.is_some() {
        dual_stack_families(spec, &policy, families, &mut errs);
    } else if ty != "ExternalName" {
        if policy == "RequireDualStack" {
            errs.push(Cause::new("FieldValueInvalid", "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services", Some("spec.ipFamilyPolicy".into())));
            if families.len() < 2 {
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: \"IPv6\": not configured on this cluster",
                    Some("spec.ipFamilies[1]".into()),
                ));
            }
        }
        for (i, f) in families.iter().enumerate() {
            if f == "IPv6" {
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    "Invalid value: \"IPv6\": not configured on this cluster",
                    Some(format!("spec.ipFamilies[{i}]")),
                ));
            }
        }
        spec["ipFamilyPolicy"] = json!(policy);
        spec["ipFamilies"] = json!(["IPv4"]);
    }
    // Ports.
    let old_ports: Vec<Value> = old
        .and_then(|o| o.pointer("/spec/ports"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty()
        && ty != "ExternalName"
        && spec.get("clusterIP").and_then(Value::as_str) != Some("None")
    {
        errs.push(Cause::new(
            "FieldValueRequired",
            "Required value",
            Some("spec.ports".into()),
        ));
    }
    let many = ports.len() > 1;
    let mut duplicates = Vec::new();
    let mut seen = Vec::new();
    for (i, p) in ports.iter_mut().enumerate() {
        if p.get("protocol").is_none() {
            p["protocol"] = json!("TCP");
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if p.get("targetPort").is_none() {
            p["targetPort"] = json!(port);
        }
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if many && name.is_empty() {
            errs.push(Cause::new(
                "FieldValueRequired",
                "Required value",
                Some(format!("spec.ports[{i}].name")),
            ));
        }
        if !(1..=65535).contains(&port) {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {port}: must be between 1 and 65535, inclusive"),
                Some(format!("spec.ports[{i}].port")),
            ));
        }
        if let Some(t) = p.get("targetPort").and_then(Value::as_i64)
            && !(1..=65535).contains(&t)
        {
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {t}: must be between 1 and 65535, inclusive"),
                Some(format!("spec.ports[{i}].targetPort")),
            ));
        }
        let proto = p["protocol"].as_str().unwrap_or("TCP").to_string();
        if seen.contains(&(port, proto.clone())) {
            duplicates.push(Cause::new(
                "FieldValueDuplicate",
                format!("Duplicate value: {{\"port\":{port},\"protocol\":{proto:?}}}"),
                Some(format!("spec.ports[{i}]")),
            ));
        }
        seen.push((port, proto));
    }
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&ty.as_str()) {
        errs.push(Cause::new("FieldValueNotSupported", format!("Unsupported value: {ty:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""), Some("spec.type".into())));
    }
    errs.extend(duplicates);
    let allocate = ty == "NodePort"
        || (lb
            && spec
                .get("allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                != Some(false));
    for p in ports.iter_mut() {
        if !uses_node_ports {
            if let Some(o) = p.as_object_mut() {
                o.remove("nodePort");
            }
            continue;
        }
        if p.get("nodePort").is_none() {
            // An update that leaves nodePort out keeps the one already allocated for that port.
            let kept = old_ports
                .iter()
                .find(|o| {
                    o.get("port") == p.get("port")
                        && o.get("protocol").unwrap_or(&json!("TCP")) == &p["protocol"]
                })
                .and_then(|o| o.get("nodePort"))
                .cloned();
            match kept {
                Some(k) => p["nodePort"] = k,
                None if allocate => {
                    if let Some(n) = taken.node_port(cfg) {
                        p["nodePort"] = json!(n);
                    }
                }
                None => {}
            }
        }
    }
    if !ports.is_empty() || spec.get("ports").is_some() {
        spec["ports"] = Value::Array(ports);
    }
    if uses_node_ports
        && spec["externalTrafficPolicy"] == "Local"
        && lb
        && spec.get("healthCheckNodePort").is_none()
    {
        let kept = old
            .and_then(|o| o.pointer("/spec/healthCheckNodePort"))
            .cloned();
        match kept {
            Some(k) => spec["healthCheckNodePort"] = k,
            None => {
                if let Some(n) = taken.node_port(cfg) {
                    spec["healthCheckNodePort"] = json!(n);
                }
            }
        }
    }
    // Cluster IP.
    if ty != "ExternalName" {
        let old_ip = old.and_then(|o| o.pointer("/spec/clusterIP")).cloned();
        match (spec.get("clusterIP").cloned(), old_ip) {
            (None, Some(o)) => {
                spec["clusterIP"] = o.clone();
                let old_ips = old.and_then(|v| v.pointer("/spec/clusterIPs")).cloned();
                spec["clusterIPs"] = old_ips.unwrap_or_else(|| json!([o]));
            }
            (Some(new), Some(o)) if new != o => {
                errs.push(Cause::new(
                    "FieldValueInvalid",
                    format!("Invalid value: [{new}]: may not change once set"),
                    Some("spec.clusterIPs[0]".into()),
                ));
            }
            (None, None) => {
                let families: Vec<String> = spec["ipFamilies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(str::to_string))
                    .collect();
                let ips: Vec<String> = families
                    .iter()
                    .filter_map(|f| match f.as_str() {
                        "IPv6" => taken.cluster_ip_v6(cfg),
                        _ => taken.cluster_ip(cfg),
                    })
                    .collect();
                if let Some(first) = ips.first() {
                    spec["clusterIP"] = json!(first);
                    spec["clusterIPs"] = json!(ips);
                }
            }
            (Some(ip), _) => {
                if spec.get("clusterIPs").is_none() {
                    spec["clusterIPs"] = json!([ip]);
                }
            }
        }
    }
    // loadBalancerClass.
    let class = spec
        .get("loadBalancerClass")
        .and_then(Value::as_str)
        .map(str::to_string);
    if class.is_some() && !lb {
        errs.push(Cause::new(
            "FieldValueForbidden",
            "Forbidden: may only be used when `type` is 'LoadBalancer'",
            Some("spec.loadBalancerClass".into()),
        ));
    }
    if let Some(old) = old
        && ctype(old) == "LoadBalancer"
        && lb
    {
        let old_class = spec_str(old, "loadBalancerClass").map(str::to_string);
        if old_class != class {
            let shown = class
                .as_deref()
                .map(|c| format!("{c:?}"))
                .unwrap_or_else(|| "null".into());
            errs.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {shown}: may not change once set"),
                Some("spec.loadBalancerClass".into()),
            ));
        }
    }
    for (i, r) in spec
        .get("loadBalancerSourceRanges")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = r.as_str().unwrap_or("");
        if s.parse::<ipnet::IpNet>().is_err() {
            errs.push(Cause::new("FieldValueInvalid", format!("Invalid value: {s:?}: must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"), Some(format!("spec.LoadBalancerSourceRanges[{i}]"))));
        }
    }
    // Status: always present; cleared when the Service stops being a LoadBalancer.
    if !lb || svc.get("status").is_none() {
        svc["status"] = json!({"loadBalancer": {}});
    }
    if svc.pointer("/status/loadBalancer").is_none() {
        svc["status"]["loadBalancer"] = json!({});
    }
    errs.extend(validate_status(svc));
    errs
}

/// Checks `status.loadBalancer.ingress`: valid IPs, `ipMode` only VIP/Proxy and only with `ip`.
pub fn validate_status(svc: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    let ingress = svc
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, ing) in ingress.iter().enumerate() {
        let ip = ing.get("ip").and_then(Value::as_str);
        if let Some(ip) = ip
            && ip.parse::<IpAddr>().is_err()
        {
            errs.push(Cause::new("FieldValueInvalid", format!("Invalid value: {ip:?}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"), Some(format!("status.loadBalancer.ingress[{i}].ip"))));
        }
        if let Some(mode) = ing.get("ipMode").and_then(Value::as_str) {
            if ip.is_none() {
                errs.push(Cause::new(
                    "FieldValueForbidden",
                    "Forbidden: may not be specified when `ip` is not set",
                    Some(format!("status.loadBalancer.ingress[{i}].ipMode")),
                ));
            } else if mode != "VIP" && mode != "Proxy" {
                errs.push(Cause::new(
                    "FieldValueNotSupported",
                    format!("Unsupported value: {mode:?}: supported values: \"Proxy\", \"VIP\""),
                    Some(format!("status.loadBalancer.ingress[{i}].ipMode")),
                ));
            }
        }
    }
    errs
}

/// IP families of a dual-stack cluster, as kube-apiserver defaults and validates them: no
/// families means IPv4 (and IPv6 too when the policy asks for two); one family under a
/// dual-stack policy gets the other added; two families need a dual-stack policy.
fn dual_stack_families(
    spec: &mut Value,
    policy: &str,
    families: Vec<String>,
    errs: &mut Vec<Cause>,
) {
    let dual_policy = matches!(policy, "PreferDualStack" | "RequireDualStack");
    for (i, f) in families.iter().enumerate() {
        if f != "IPv4" && f != "IPv6" {
            errs.push(Cause::new(
                "FieldValueNotSupported",
                format!("Unsupported value: {f:?}: supported values: \"IPv4\", \"IPv6\""),
                Some(format!("spec.ipFamilies[{i}]")),
            ));
        }
    }
    if families.len() == 2 && families[0] == families[1] {
        errs.push(Cause::new(
            "FieldValueDuplicate",
            format!("Duplicate value: {:?}", families[1]),
            Some("spec.ipFamilies[1]".into()),
        ));
    }
    if families.len() > 1 && !dual_policy {
        errs.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {policy:?}: must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"),
            Some("spec.ipFamilyPolicy".into()),
        ));
    }
    let mut families = if families.is_empty() {
        vec!["IPv4".to_string()]
    } else {
        families
    };
    if dual_policy && families.len() == 1 {
        let other = if families[0] == "IPv6" {
            "IPv4"
        } else {
            "IPv6"
        };
        families.push(other.to_string());
    }
    spec["ipFamilyPolicy"] = json!(policy);
    spec["ipFamilies"] = json!(families);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_counts_what_stored_services_hold_less_the_service_being_written() {
        let a =
            json!({"spec": {"clusterIP": "10.0.0.7", "ports": [{"port": 80, "nodePort": 30007}]}});
        let b =
            json!({"spec": {"clusterIP": "10.0.0.8", "ports": [{"port": 80, "nodePort": 30008}]}});
        let mut index = ServiceIndex::default();
        index.add(&a);
        index.add(&b);
        let writing_a = Taken::except(&index, Some(&a));
        assert!(
            !writing_a.ip_taken("10.0.0.7"),
            "a Service keeps its own address"
        );
        assert!(!writing_a.port_taken(30007));
        assert!(writing_a.ip_taken("10.0.0.8") && writing_a.port_taken(30008));
        index.remove(&b);
        let new = Taken::except(&index, None);
        assert!(
            !new.ip_taken("10.0.0.8") && !new.port_taken(30008),
            "deleted: free again"
        );
        assert!(new.ip_taken("10.0.0.7"));
    }

    #[test]
    fn secondary_cluster_ips_count_as_taken() {
        let other =
            json!({"spec": {"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5", "fd00:10:96::7"]}});
        let taken = Taken::from_services(std::iter::once(&other));
        assert!(taken.ips.contains("fd00:10:96::7"));
    }

    #[test]
    fn ipv4_only_cluster_rejects_require_dual_stack() {
        let mut svc = json!({"metadata": {"name": "web"}, "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}});
        let errs = prepare(
            &mut svc,
            None,
            &mut Taken::default(),
            &ClusterConfig::default(),
        );
        let fields: Vec<_> = errs
            .iter()
            .map(|c| c.field.clone().unwrap_or_default())
            .collect();
        assert_eq!(fields, vec!["spec.ipFamilyPolicy", "spec.ipFamilies[1]"]);
    }
}
