{{/*
Hand-written helpers. The chart's static half (CRDs, RBAC, webhook registrations, values.yaml) is generated
from src/liqo/install by `make chart`; the templates here mirror liqo.install.manifests, and
tests/integration/install/test_chart.py holds `helm template` equal to it.
*/}}

{{/* liqo lives in the namespace `liqo`: every name in the code says so. */}}
{{- define "liqo.namespace" -}}
{{- if ne .Release.Namespace "liqo" -}}
{{- fail "install liqo into the namespace liqo: helm install liqo charts/liqo --namespace liqo --create-namespace" -}}
{{- end -}}
liqo
{{- end -}}

{{/* How the API server reaches the webhook at a path: (list $ "/path"). */}}
{{- define "liqo.webhookClientConfig" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- if $root.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) $path | quote }}
{{- else -}}
service:
  namespace: liqo
  name: liqo-webhook
  path: {{ $path | quote }}
  port: 443
{{- end -}}
{{- end -}}

{{/* Where liqo's pods may run. */}}
{{- define "liqo.placement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "liqo.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{/* Ready once the process serves (every replica); alive while its event loop answers. */}}
{{- define "liqo.probes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 2
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* The fabric's pods: root with NET_ADMIN alone (a capability takes effect for root only). */}}
{{- define "liqo.netAdminSecurity" -}}
securityContext:
  runAsUser: 0
  runAsNonRoot: false
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
    add: [NET_ADMIN]
{{- end -}}
