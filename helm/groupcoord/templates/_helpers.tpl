{{/* Names ------------------------------------------------------------------------------ */}}
{{- define "groupcoord.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "groupcoord.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "groupcoord.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "groupcoord.shards.fullname" -}}{{ include "groupcoord.fullname" . }}-shard{{- end }}
{{- define "groupcoord.shards.headless" -}}{{ include "groupcoord.fullname" . }}-shards{{- end }}
{{- define "groupcoord.shards.service" -}}{{ include "groupcoord.fullname" . }}-shards-grpc{{- end }}
{{- define "groupcoord.assignors.fullname" -}}{{ include "groupcoord.fullname" . }}-assignor{{- end }}
{{- define "groupcoord.gateway.fullname" -}}{{ include "groupcoord.fullname" . }}-gateway{{- end }}
{{- define "groupcoord.redis.fullname" -}}{{ include "groupcoord.fullname" . }}-redis{{- end }}

{{- define "groupcoord.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "groupcoord.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels: pass (dict "ctx" $ "component" "shard") ----------------------------------- */}}
{{- define "groupcoord.labels" -}}
helm.sh/chart: {{ include "groupcoord.chart" .ctx }}
{{ include "groupcoord.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: groupcoord
{{- end }}

{{- define "groupcoord.selectorLabels" -}}
app.kubernetes.io/name: {{ include "groupcoord.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "groupcoord.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The store URL ----------------------------------------------------------------------- */}}
{{- define "groupcoord.redis.bundled" -}}
{{- if and (not .Values.redis.url) (not .Values.redis.existingSecret) }}true{{ end }}
{{- end }}

{{- define "groupcoord.store.secretName" -}}
{{- default (printf "%s-store" (include "groupcoord.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{- define "groupcoord.store.secretKey" -}}
{{- if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{- define "groupcoord.store.url" -}}
{{- if .Values.redis.url }}
{{- $u := urlParse .Values.redis.url }}
{{- if not (has $u.scheme (list "redis" "rediss" "redis+cluster" "rediss+cluster")) }}
{{- fail (printf "redis.url must be redis://host:port/db, rediss://..., or redis+cluster://host1:port1,host2:port2 (rediss+cluster:// with TLS), not %q" .Values.redis.url) }}
{{- end }}
{{- if or .Values.redis.username .Values.redis.password }}
{{- $user := urlquery .Values.redis.username | replace "+" "%20" }}
{{- $password := urlquery .Values.redis.password | replace "+" "%20" }}
{{- $_ := set $u "userinfo" (printf "%s:%s" $user $password) }}
{{- end }}
{{- urlJoin $u }}
{{- else }}
{{- printf "redis://%s.%s.svc.%s:6379/0" (include "groupcoord.redis.fullname" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}
{{- end }}

{{/* Environment every groupcoord process gets --------------------------------------------- */}}
{{- define "groupcoord.env.common" -}}
- name: GROUPCOORD_HOST
  value: "0.0.0.0"
- name: GROUPCOORD_LOG_LEVEL
  value: {{ .Values.common.logLevel | quote }}
- name: GROUPCOORD_LIBRARY_LOG_LEVEL
  value: {{ .Values.common.libraryLogLevel | quote }}
- name: GROUPCOORD_LOG_FORMAT
  value: {{ .Values.common.logFormat | quote }}
{{- with .Values.common.otlpEndpoint }}
- name: GROUPCOORD_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .Values.metrics.enabled }}
- name: GROUPCOORD_METRICS_PORT
  value: {{ .Values.metrics.port | int64 | quote }}
{{- end }}
{{- end }}

{{/* Proxy-mode options (shards and gateways) -------------------------------------------- */}}
{{- define "groupcoord.env.upstream" -}}
{{- if .Values.upstream.bootstrap }}
- name: GROUPCOORD_UPSTREAM_BOOTSTRAP
  value: {{ .Values.upstream.bootstrap | quote }}
- name: GROUPCOORD_UPSTREAM_SECURITY_PROTOCOL
  value: {{ .Values.upstream.securityProtocol | quote }}
{{- if .Values.upstream.tls.secretName }}
- name: GROUPCOORD_UPSTREAM_SSL_CAFILE
  value: /etc/groupcoord/upstream-tls/ca.crt
{{- if .Values.upstream.tls.clientCertificate }}
- name: GROUPCOORD_UPSTREAM_SSL_CERTFILE
  value: /etc/groupcoord/upstream-tls/tls.crt
- name: GROUPCOORD_UPSTREAM_SSL_KEYFILE
  value: /etc/groupcoord/upstream-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* TLS (docs/security.md) ----------------------------------------------------------- */}}
{{- define "groupcoord.grpcTls.secretName" -}}
{{- default (printf "%s-grpc-tls" (include "groupcoord.fullname" .)) .Values.tls.grpc.secretName }}
{{- end }}
{{- define "groupcoord.kafkaTls.secretName" -}}
{{- default (printf "%s-kafka-tls" (include "groupcoord.fullname" .)) .Values.tls.kafka.secretName }}
{{- end }}
{{- define "groupcoord.kafkaTls.enabled" -}}
{{- if has (upper .Values.gateway.securityProtocol) (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}
{{- define "groupcoord.sasl.enabled" -}}
{{- if hasPrefix "SASL_" (upper .Values.gateway.securityProtocol) }}true{{ end }}
{{- end }}

{{/* The store URL from its Secret (shards; gateways with SASL or the ACL APIs) */}}
{{- define "groupcoord.env.store" -}}
- name: GROUPCOORD_STORE
  valueFrom:
    secretKeyRef:
      name: {{ include "groupcoord.store.secretName" . }}
      key: {{ include "groupcoord.store.secretKey" . }}
{{- end }}

{{/* The authorizer's options (shards; the gateway's ACL APIs take the first two) */}}
{{- define "groupcoord.env.authorizer" -}}
{{- $a := .ctx.Values.shards.authorizer }}
{{- if $a.enabled }}
- name: GROUPCOORD_AUTHORIZER
  value: "true"
{{- with $a.superUsers }}
- name: GROUPCOORD_SUPER_USERS
  value: {{ join ";" . | quote }}
{{- end }}
{{- if and .shard $a.trustedGatewayPrincipals }}
- name: GROUPCOORD_TRUSTED_GATEWAY_PRINCIPALS
  value: {{ join ";" $a.trustedGatewayPrincipals | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* gRPC TLS options: (dict "ctx" . "server" true|false); servers also get --tls-client-auth
     and the plaintext health-only port of the probes */}}
{{- define "groupcoord.env.grpcTls" -}}
{{- $t := .ctx.Values.tls.grpc }}
{{- if $t.enabled }}
- name: GROUPCOORD_TLS_CERTFILE
  value: /etc/groupcoord/grpc-tls/tls.crt
- name: GROUPCOORD_TLS_KEYFILE
  value: /etc/groupcoord/grpc-tls/tls.key
- name: GROUPCOORD_TLS_CAFILE
  value: /etc/groupcoord/grpc-tls/ca.crt
{{- with $t.serverName }}
- name: GROUPCOORD_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- if .server }}
- name: GROUPCOORD_TLS_CLIENT_AUTH
  value: {{ $t.clientAuth | quote }}
- name: GROUPCOORD_HEALTH_PORT
  value: {{ $t.healthPort | int64 | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The port the probes of a shard or assignor use: the plaintext health port under TLS */}}
{{- define "groupcoord.probePort" -}}
{{- if .ctx.Values.tls.grpc.enabled }}{{ .ctx.Values.tls.grpc.healthPort }}{{ else }}{{ .port }}{{ end }}
{{- end }}

{{/* Volumes: a writable /tmp and data dir on a read-only root, the upstream TLS Secret ---- */}}
{{- define "groupcoord.volumes" -}}
- name: tmp
  emptyDir: {}
- name: data
  emptyDir: {}
{{- if and .Values.upstream.bootstrap .Values.upstream.tls.secretName }}
- name: upstream-tls
  secret:
    secretName: {{ .Values.upstream.tls.secretName }}
{{- end }}
{{- if .Values.tls.grpc.enabled }}
- name: grpc-tls
  secret:
    secretName: {{ include "groupcoord.grpcTls.secretName" . }}
{{- end }}
{{- end }}

{{- define "groupcoord.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: /var/lib/groupcoord
{{- if and .Values.upstream.bootstrap .Values.upstream.tls.secretName }}
- name: upstream-tls
  mountPath: /etc/groupcoord/upstream-tls
  readOnly: true
{{- end }}
{{- if .Values.tls.grpc.enabled }}
- name: grpc-tls
  mountPath: /etc/groupcoord/grpc-tls
  readOnly: true
{{- end }}
{{- end }}

{{/* Native gRPC probes: (dict "probes" .Values.x.probes "port" N "liveness" NAME) -------- */}}
{{- define "groupcoord.probes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
    service: {{ .liveness | quote }}
  periodSeconds: {{ .probes.startup.periodSeconds }}
  failureThreshold: {{ .probes.startup.failureThreshold }}
  timeoutSeconds: {{ .probes.startup.timeoutSeconds }}
readinessProbe:
  grpc:
    port: {{ .port }}
    service: ""
  periodSeconds: {{ .probes.readiness.periodSeconds }}
  failureThreshold: {{ .probes.readiness.failureThreshold }}
  timeoutSeconds: {{ .probes.readiness.timeoutSeconds }}
livenessProbe:
  grpc:
    port: {{ .port }}
    service: {{ .liveness | quote }}
  periodSeconds: {{ .probes.liveness.periodSeconds }}
  failureThreshold: {{ .probes.liveness.failureThreshold }}
  timeoutSeconds: {{ .probes.liveness.timeoutSeconds }}
{{- end }}

{{- define "groupcoord.metricsPort" -}}
{{- if .Values.metrics.enabled }}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}
{{- end }}

{{/* Pod scheduling fields shared by the components: (dict "c" .Values.x) ----------------- */}}
{{- define "groupcoord.scheduling" -}}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{/* --set NAME=VALUE list as GROUPCOORD_CONFIG (comma-separated, sorted by name) ---------- */}}
{{- define "groupcoord.settings" -}}
{{- $items := list }}
{{- range $k, $v := . }}
{{- if or (kindIs "bool" $v) (kindIs "string" $v) }}
{{- $items = append $items (printf "%s=%v" $k $v) }}
{{- else }}
{{- $items = append $items (printf "%s=%v" $k (int64 $v)) }}
{{- end }}
{{- end }}
{{- join "," $items }}
{{- end }}

{{/* HorizontalPodAutoscaler: (dict "ctx" $ "c" .Values.x "component" C "name" N) -------- */}}
{{- define "groupcoord.hpa" -}}
{{- if .c.autoscaling.enabled }}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ .name }}
  labels:
    {{- include "groupcoord.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ .name }}
  minReplicas: {{ .c.autoscaling.minReplicas }}
  maxReplicas: {{ .c.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .c.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
{{- end }}

{{/* PodDisruptionBudget: (dict "ctx" $ "c" .Values.x "component" C "name" N) ------------- */}}
{{- define "groupcoord.pdb" -}}
{{- if .c.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "groupcoord.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
spec:
  maxUnavailable: {{ .c.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "groupcoord.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end }}
{{- end }}

{{/* NetworkPolicy rule for the metrics port: (dict "metrics" .Values.metrics "np" .Values.networkPolicy) */}}
{{- define "groupcoord.np.metrics" -}}
{{- if .metrics.enabled }}
- ports:
    - port: {{ .metrics.port }}
      protocol: TCP
  {{- with .np.metricsScrapers }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
