{{/*
Names, labels and small pieces shared by every template.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "ferrolb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object name: fullnameOverride, else the release name when it already contains
the chart name, else "<release>-<chart>". Kept at 40 characters so that suffixes such as
"-controller-metrics" stay within the 63 characters of a DNS label.
*/}}
{{- define "ferrolb.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "ferrolb.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select one component's Pods. Call with (dict "root" $ "component" "controller"). */}}
{{- define "ferrolb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferrolb.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels on every object. Call with (dict "root" $ "component" "controller"). */}}
{{- define "ferrolb.labels" -}}
{{ include "ferrolb.selectorLabels" . }}
app.kubernetes.io/part-of: ferrolb
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* One component's object name: "<fullname>-<component>". */}}
{{- define "ferrolb.componentName" -}}
{{- printf "%s-%s" (include "ferrolb.fullname" .root) .component -}}
{{- end -}}

{{/* An image reference; the tag defaults to the chart's appVersion. Call with (dict "root" $ "image" .Values.controller.image). */}}
{{- define "ferrolb.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The Secret that holds the speakers' gossip key under "secretkey". */}}
{{- define "ferrolb.memberlistSecretName" -}}
{{- default (printf "%s-memberlist" (include "ferrolb.fullname" .)) .Values.speaker.memberlist.existingSecret -}}
{{- end -}}

{{/* The metrics listen address "<bindAddress>:<port>". Call with (dict "root" $ "port" 7472). */}}
{{- define "ferrolb.metricsAddr" -}}
{{- printf "%s:%d" .root.Values.metrics.bindAddress (int .port) -}}
{{- end -}}

{{/* Environment both binaries read: the namespace they live in (--namespace). */}}
{{- define "ferrolb.podNamespaceEnv" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end -}}

{{/* Refuse values that render but cannot work. */}}
{{- define "ferrolb.validate" -}}
{{- if not (or .Values.l2.enabled .Values.bgp.enabled) -}}
{{- fail "l2.enabled and bgp.enabled are both false: the speakers would announce nothing; enable at least one" -}}
{{- end -}}
{{- end -}}

{{/*
What FerroLB handles: the same flags for the controller and the speaker, so the speaker never
announces an address the controller does not manage.
*/}}
{{- define "ferrolb.classArgs" -}}
- --load-balancer-class={{ .Values.loadBalancerClass }}
{{- if .Values.ignoreUnclassed }}
- --ignore-unclassed
{{- end }}
{{- end }}
