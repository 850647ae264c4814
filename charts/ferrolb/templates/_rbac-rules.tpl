{{/*
Every permission FerroLB's binaries get, in one place. Each rule here is an API call the binary
makes; tests/tests/chart.rs holds the same list as the table the rendered Roles are compared with,
and the API calls recorded from the binaries are to be compared with that table.

  controller: watches Services, Namespaces, the ferrolb.io configuration and the names of the
              Secrets in its namespace (metadata only: BGP peers' password Secrets must exist;
              it never reads their data); writes Services' status and their
              allocated-from-pool annotation, the Ready condition of pools, advertisements,
              communities and BGP peers; reads, creates and merge patches the status of its
              ConfigurationState (`controller`); takes the leader Lease; creates Events
              (events.k8s.io; each a new object, never patched).
  speaker:    watches what to announce (Services, EndpointSlices, Nodes, the ferrolb.io kinds),
              the other speakers (Pods) and the gossip and BGP password Secrets in its namespace;
              lists, creates and deletes its ServiceL2Status / ServiceBGPStatus /
              BGPSessionState objects and merge patches their status; lists and creates its
              ConfigurationState (`speaker-<node>`) and merge patches its status; watches the
              `ferrolb-l2-view` Lease and creates or replaces it (under its resourceVersion) while
              gossip misses speakers Kubernetes counts as up, to break a partition's tie;
              creates Events (events.k8s.io; each a new object, never patched).
*/}}

{{/* Controller, cluster-wide (ClusterRole). */}}
{{- define "ferrolb.rules.controller.cluster" -}}
- apiGroups: [""]
  resources: [services, namespaces]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [services/status]
  verbs: [patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
{{- end -}}

{{/* Controller, in the install namespace (Role). */}}
{{- define "ferrolb.rules.controller.namespace" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [list, watch]
- apiGroups: [ferrolb.io]
  resources: [ipaddresspools, l2advertisements, bgpadvertisements, bgppeers, communities, bfdprofiles]
  verbs: [list, watch]
- apiGroups: [ferrolb.io]
  resources: [ipaddresspools/status, l2advertisements/status, bgpadvertisements/status, bgppeers/status, communities/status]
  verbs: [patch]
- apiGroups: [ferrolb.io]
  resources: [configurationstates]
  verbs: [get, create]
- apiGroups: [ferrolb.io]
  resources: [configurationstates/status]
  verbs: [patch]
{{- end -}}

{{/* Speaker, cluster-wide (ClusterRole). */}}
{{- define "ferrolb.rules.speaker.cluster" -}}
- apiGroups: [""]
  resources: [services, nodes]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create]
{{- end -}}

{{/* Speaker, in the install namespace (Role). */}}
{{- define "ferrolb.rules.speaker.namespace" -}}
- apiGroups: [""]
  resources: [pods, secrets]
  verbs: [list, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [list, watch, create, update]
- apiGroups: [ferrolb.io]
  resources: [ipaddresspools, l2advertisements, bgpadvertisements, bgppeers, communities, bfdprofiles]
  verbs: [list, watch]
- apiGroups: [ferrolb.io]
  resources: [servicel2statuses, servicebgpstatuses, bgpsessionstates]
  verbs: [list, create, delete]
- apiGroups: [ferrolb.io]
  resources: [servicel2statuses/status, servicebgpstatuses/status, bgpsessionstates/status]
  verbs: [patch]
- apiGroups: [ferrolb.io]
  resources: [configurationstates]
  verbs: [list, create]
- apiGroups: [ferrolb.io]
  resources: [configurationstates/status]
  verbs: [patch]
{{- end -}}
