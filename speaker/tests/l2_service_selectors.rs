//! `serviceSelectors` on a real segment: the real `ferrolb-speaker` on three node namespaces
//! and a client asking with `arping` and `ndisc6` (the lab of `tests/tests/speaker_l2.rs`, whose
//! support module this file shares). An `L2Advertisement` that selects `tier: public` answers
//! for the addresses of the Services so labelled and not for the others, and follows their
//! labels when they change.
//!
//! Needs root, `ip`, `arping`, `ndisc6` and the speaker binary; skipped with a printed reason
//! when one is missing, a failure under `FERROLB_REQUIRE_BINARIES=1`.

#[allow(dead_code)] // shared with the tests crate; this file uses part of it
#[path = "../../tests/tests/speaker_support/mod.rs"]
mod speaker_support;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use speaker_support::{Cluster, POOL, endpoints, put_ferrolb, service};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

async fn label(client: kube::Client, name: &str, tier: &str) {
    Api::<Service>::namespaced(client, "default")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": tier}}})),
        )
        .await
        .expect("the Service's labels are patched");
}

#[test]
fn only_the_addresses_of_selected_services_are_answered_and_labels_are_followed() {
    let Some(c) = Cluster::start("fsel") else {
        return;
    };
    c.wait_for_gossip();
    let public = [ip("10.99.0.106"), ip("fd00:99::106")];
    let internal = [ip("10.99.0.107"), ip("fd00:99::107")];
    let client = c.client();
    c.block(async move {
        put_ferrolb(
            client.clone(),
            "L2Advertisement",
            "l2advertisements",
            "public",
            json!({"ipAddressPools": [POOL], "serviceSelectors": [{"matchLabels": {"tier": "public"}}]}),
        )
        .await;
        // `internal` first: once `public` is answered, the speakers have seen both.
        for (name, ips, tier) in [("internal", internal, "internal"), ("public", public, "public")] {
            service(client.clone(), name, &ips, false).await;
            label(client.clone(), name, tier).await;
            endpoints(client.clone(), name, &[("node-b", true)]).await;
        }
    });
    let answered_by_owner = |addr: IpAddr| {
        let owner = c.wait_for_owner(addr, |_| true);
        let mac = vec![c.topo.node_mac(owner).expect("eth0 has a MAC")];
        assert_eq!(c.wait_for_answers(addr, &mac), mac, "answers for {addr}");
    };
    for addr in public {
        answered_by_owner(addr);
    }
    for addr in internal {
        assert_eq!(
            c.topo.who_answers(addr).expect("arping / ndisc6 run"),
            Vec::<String>::new(),
            "{addr} belongs to a Service the advertisement does not select"
        );
        assert!(c.owners(addr).is_empty(), "no status claims {addr}");
    }
    // Labels swap: each address follows its Service's new labels.
    let client = c.client();
    c.block(async move {
        label(client.clone(), "internal", "public").await;
        label(client, "public", "internal").await;
    });
    for addr in internal {
        answered_by_owner(addr);
    }
    for addr in public {
        assert_eq!(
            c.wait_for_answers(addr, &[]),
            Vec::<String>::new(),
            "{addr} is no longer selected"
        );
    }
}
