{{/* The chart name, overridable. */}}
{{- define "flashsale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The prefix of every resource name: RELEASE-flashsale, or RELEASE when it
already contains the chart name. */}}
{{- define "flashsale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "flashsale.operator.fullname" -}}
{{- printf "%s-operator" (include "flashsale.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "flashsale.api.fullname" -}}
{{- printf "%s-api" (include "flashsale.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Cluster-scoped names carry the namespace: two releases of one name in
two namespaces must not share a ClusterRole. */}}
{{- define "flashsale.operator.clusterName" -}}
{{- printf "%s-%s-operator" .Release.Namespace (include "flashsale.fullname" .) }}
{{- end }}

{{- define "flashsale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "flashsale.labels" -}}
helm.sh/chart: {{ include "flashsale.chart" . }}
app.kubernetes.io/name: {{ include "flashsale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flashsale
{{- end }}

{{/* Selector labels of one component: call with (list $ "api"). */}}
{{- define "flashsale.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "flashsale.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Labels of one component's objects: call with (list $ "api"). */}}
{{- define "flashsale.componentLabels" -}}
{{ include "flashsale.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "flashsale.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "flashsale.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "flashsale.api.serviceAccountName" -}}
{{- if .Values.api.serviceAccount.create }}
{{- default (include "flashsale.api.fullname" .) .Values.api.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.api.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* image: call with (list $ .Values.images.operator). */}}
{{- define "flashsale.image" -}}
{{- $ := index . 0 }}{{ $image := index . 1 -}}
{{- printf "%s:%s" $image.repository (default $.Chart.AppVersion $image.tag) }}
{{- end }}

{{/* The namespace the API serves. */}}
{{- define "flashsale.api.saleNamespace" -}}
{{- default .Release.Namespace .Values.api.saleNamespace }}
{{- end }}

{{/* The database Secret: its name and its keys. */}}
{{- define "flashsale.database.secretName" -}}
{{- default (printf "%s-database" (include "flashsale.fullname" .)) .Values.database.existingSecret }}
{{- end }}

{{- define "flashsale.database.secretKey" -}}
{{- if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{- define "flashsale.database.podSecretKey" -}}
{{- if .Values.database.existingSecret }}{{ default .Values.database.existingSecretKey .Values.database.existingSecretPodKey }}{{ else }}pod-url{{ end }}
{{- end }}

{{/* postgres://user[:password]@host:port/name[?sslmode=...], the password
percent-encoded (urlquery writes a space as "+", which a URL's userinfo
would read literally). */}}
{{- define "flashsale.database.url" -}}
{{- $db := .Values.database }}
{{- $user := $db.user | urlquery | replace "+" "%20" }}
{{- $auth := $user }}
{{- if $db.password }}
{{- $auth = printf "%s:%s" $user ($db.password | urlquery | replace "+" "%20") }}
{{- end }}
{{- $url := printf "postgres://%s@%s:%v/%s" $auth $db.host $db.port $db.name }}
{{- if $db.sslMode }}
{{- $url = printf "%s?sslmode=%s" $url $db.sslMode }}
{{- end }}
{{- $url }}
{{- end }}

{{/* The Redis URL as an env var's value or valueFrom. */}}
{{- define "flashsale.redis.env" -}}
{{- if .Values.redis.existingSecret -}}
valueFrom:
  secretKeyRef:
    name: {{ .Values.redis.existingSecret }}
    key: {{ .Values.redis.existingSecretKey }}
{{- else -}}
value: {{ required "redis.url is required" .Values.redis.url | quote }}
{{- end }}
{{- end }}

{{/* The Kafka bootstrap list as an env var's value or valueFrom; "pod"
selects the sale pods' one. */}}
{{- define "flashsale.kafka.env" -}}
{{- $root := index . 0 }}
{{- $pod := eq (index . 1) "pod" }}
{{- $kafka := $root.Values.kafka }}
{{- if $kafka.existingSecret -}}
valueFrom:
  secretKeyRef:
    name: {{ $kafka.existingSecret }}
    key: {{ ternary (default $kafka.existingSecretKey $kafka.existingSecretPodKey) $kafka.existingSecretKey $pod }}
{{- else -}}
value: {{ ternary (default $kafka.bootstrap $kafka.podBootstrap) (required "kafka.bootstrap is required" $kafka.bootstrap) $pod | quote }}
{{- end }}
{{- end }}

{{/* The Secret holding the payment provider's callback secret. */}}
{{- define "flashsale.payments.secretName" -}}
{{- printf "%s-payments" (include "flashsale.fullname" .) }}
{{- end }}

{{- define "flashsale.purchaseTokens.secretName" -}}
{{- printf "%s-purchase-tokens" (include "flashsale.fullname" .) }}
{{- end }}

{{- /*
An API Secret of one key (dict: ctx, name, key, value): the value given, else
the one an earlier install generated, else a new random one, so a generated
secret stays the same across upgrades.
*/}}
{{- define "flashsale.keptSecret" -}}
{{- $value := .value }}
{{- if not $value }}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace .name }}
{{- if and $old $old.data (hasKey $old.data .key) }}
{{- $value = index $old.data .key | b64dec }}
{{- else }}
{{- $value = randAlphaNum 48 }}
{{- end }}
{{- end }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "flashsale.componentLabels" (list .ctx "api") | nindent 4 }}
type: Opaque
data:
  {{ .key }}: {{ $value | b64enc | quote }}
{{- end }}

{{/* The JWT Secret holding the chart's HS256 secret and RS256 public key. */}}
{{- define "flashsale.jwt.secretName" -}}
{{- printf "%s-jwt" (include "flashsale.fullname" .) }}
{{- end }}

{{/* The chart needs its own JWT Secret: an HS256 key or an RS256 public key
that no existingSecret provides. */}}
{{- define "flashsale.jwt.chartSecret" -}}
{{- $j := .Values.jwt -}}
{{- if or (and $j.hs256.enabled (not $j.hs256.existingSecret)) (and $j.rs256.publicKey (not $j.rs256.existingSecret)) }}true{{ end }}
{{- end }}

{{/* The ConfigMap holding the services' CA, and its key; empty: none. */}}
{{- define "flashsale.servicesCa.configMap" -}}
{{- if .Values.servicesCa.existingConfigMap -}}
{{ .Values.servicesCa.existingConfigMap }}
{{- else if .Values.servicesCa.certificate -}}
{{ include "flashsale.fullname" . }}-services-ca
{{- end -}}
{{- end }}

{{/* SSL_CERT_FILE naming the services' CA, as env entries (or nothing). */}}
{{- define "flashsale.servicesCa.env" -}}
{{- if include "flashsale.servicesCa.configMap" . }}
- name: SSL_CERT_FILE
  value: /etc/flashsale/services-ca/ca.crt
{{- end }}
{{- end }}

{{/* The CA's volume mount (or nothing). */}}
{{- define "flashsale.servicesCa.mount" -}}
{{- if include "flashsale.servicesCa.configMap" . }}
- name: services-ca
  mountPath: /etc/flashsale/services-ca
  readOnly: true
{{- end }}
{{- end }}

{{/* The CA's volume (or nothing). */}}
{{- define "flashsale.servicesCa.volume" -}}
{{- with include "flashsale.servicesCa.configMap" . }}
- name: services-ca
  configMap:
    name: {{ . }}
    items:
      - key: {{ ternary $.Values.servicesCa.existingConfigMapKey "ca.crt" (ne $.Values.servicesCa.existingConfigMap "") }}
        path: ca.crt
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget's limit: minAvailable when set, else maxUnavailable. */}}
{{- define "flashsale.disruptionBudget" -}}
{{- if not (kindIs "invalid" .minAvailable) -}}
minAvailable: {{ .minAvailable }}
{{- else -}}
maxUnavailable: {{ .maxUnavailable }}
{{- end }}
{{- end }}

{{/* A component's topologySpreadConstraints: over nodes when spreadAcrossNodes,
then the values' own. Call with (list $ "api" $values). */}}
{{- define "flashsale.spread" -}}
{{- $ := index . 0 -}}
{{- $values := index . 2 -}}
{{- $constraints := list -}}
{{- if $values.spreadAcrossNodes -}}
{{- $selector := include "flashsale.selectorLabels" (list $ (index . 1)) | fromYaml -}}
{{- $constraints = append $constraints (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" (dict "matchLabels" $selector) "matchLabelKeys" (list "pod-template-hash")) -}}
{{- end -}}
{{- $constraints = concat $constraints ($values.topologySpreadConstraints | default list) -}}
{{- if $constraints }}{{ toYaml $constraints }}{{ end -}}
{{- end }}
