{{/* Labels of every object; the component's when given. Selectors use name + component only. */}}
{{- define "gpu-portal.labels" -}}
app.kubernetes.io/name: gpu-portal
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end }}

{{- define "gpu-portal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Pod-level security: non-root, the image's uid, RuntimeDefault seccomp (Pod Security "restricted"). */}}
{{- define "gpu-portal.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsUser }}
  fsGroup: {{ .Values.runAsUser }}
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpu-portal.containerSecurityContext" -}}
securityContext:
  privileged: false
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end }}

{{/* The secrets every portal process reads from existingSecret. Call with (dict "root" $ "metrics" true). */}}
{{- define "gpu-portal.secretEnv" -}}
- name: DJANGO_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: DJANGO_SECRET_KEY
# Earlier keys while DJANGO_SECRET_KEY is rotated (docs/operator-guide.md, "Backup and restore").
- name: DJANGO_SECRET_KEY_FALLBACKS
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: DJANGO_SECRET_KEY_FALLBACKS
      optional: true
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: DATABASE_URL
{{- if .metrics }}
- name: PORTAL_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: PORTAL_METRICS_TOKEN
      optional: true
{{- end }}
{{- if .root.Values.oidc.enabled }}
- name: OIDC_RP_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.existingSecret }}
      key: OIDC_RP_CLIENT_SECRET
{{- end }}
{{- end }}

{{/* The ConfigMap's settings, as data (also written inline into the migrations hook, which runs before it exists). */}}
{{- define "gpu-portal.settings" -}}
DJANGO_ALLOWED_HOSTS: {{ printf "%s,localhost" .Values.host | quote }}
DJANGO_CSRF_TRUSTED_ORIGINS: {{ printf "https://%s" .Values.host | quote }}
PORTAL_BASE_URL: {{ printf "https://%s" .Values.host | quote }}
CELERY_BROKER_URL: {{ .Values.redis.brokerUrl | quote }}
CACHE_URL: {{ .Values.redis.cacheUrl | quote }}
PORTAL_CLUSTER_BACKEND: "kubernetes"
PORTAL_K8S_IN_CLUSTER: "true"
PORTAL_DATA_DIR: "/app/var"
PROMETHEUS_MULTIPROC_DIR: "/tmp/prometheus"
PORTAL_WORKER_METRICS_PORT: "9808"
{{- if .Values.oidc.enabled }}
OIDC_RP_CLIENT_ID: {{ .Values.oidc.clientId | quote }}
OIDC_OP_DISCOVERY_URL: {{ .Values.oidc.discoveryUrl | quote }}
PORTAL_SSO_PROVIDER_NAME: {{ .Values.oidc.providerName | quote }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}

{{/* /tmp and /app/var (PORTAL_DATA_DIR) as emptyDirs on a read-only root; the registered clusters' kubeconfigs. */}}
{{- define "gpu-portal.volumeMounts" -}}
volumeMounts:
  # gunicorn's worker heartbeat files, Python's tempfiles, the Prometheus multiprocess directory.
  - name: tmp
    mountPath: /tmp
  # PORTAL_DATA_DIR (beat's schedule file).
  - name: data
    mountPath: /app/var
{{- if and .kubeconfigs .root.Values.registeredClusters.kubeconfigSecret }}
  - name: kubeconfigs
    mountPath: /etc/gpu-portal/kubeconfigs
    readOnly: true
{{- end }}
{{- end }}

{{- define "gpu-portal.volumes" -}}
volumes:
  - name: tmp
    emptyDir: {}
  - name: data
    emptyDir: {}
{{- if and .kubeconfigs .root.Values.registeredClusters.kubeconfigSecret }}
  - name: kubeconfigs
    secret:
      secretName: {{ .root.Values.registeredClusters.kubeconfigSecret }}
      defaultMode: 0440
{{- end }}
{{- end }}

{{/* /healthz probes: readiness strict, liveness lenient (a short database outage restarts nothing). */}}
{{- define "gpu-portal.probes" -}}
# /healthz answers 200 when the process serves and the database answers. The Host header must be in
# DJANGO_ALLOWED_HOSTS (the kubelet would otherwise send the pod IP and get 400).
readinessProbe:
  httpGet:
    path: /healthz
    port: http
    httpHeaders:
      - name: Host
        value: localhost
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
# Lenient, so a short database outage takes pods out of the Service (readiness) without restarting
# every one of them.
livenessProbe:
  httpGet:
    path: /healthz
    port: http
    httpHeaders:
      - name: Host
        value: localhost
  initialDelaySeconds: 20
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 6
{{- end }}

{{/* A Celery worker Deployment for one queue. (dict "root" $ "queue" NAME "component" C "token" BOOL "args" LIST) */}}
{{- define "gpu-portal.worker" -}}
{{- $root := .root -}}
{{- $values := index $root.Values.workers .queue -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpu-portal-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpu-portal.labels" (dict "component" .component) | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  selector:
    matchLabels:
      {{- include "gpu-portal.labels" (dict "component" .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "gpu-portal.labels" (dict "component" .component) | nindent 8 }}
    spec:
      serviceAccountName: gpu-portal
      {{- if .token }}
      automountServiceAccountToken: true
      {{- else }}
      # It never talks to the cluster: no service-account token.
      automountServiceAccountToken: false
      {{- end }}
      # Celery finishes the running task on SIGTERM (warm shutdown); tasks are acked late and idempotent, so one
      # cut off after this grace period is simply run again by another worker.
      terminationGracePeriodSeconds: 60
      {{- include "gpu-portal.podSecurityContext" $root | nindent 6 }}
      containers:
        - name: worker
          image: {{ include "gpu-portal.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: {{ concat (list "celery" "-A" "portal" "worker" "-Q" .queue "-l" "info") .args | toJson }}
          ports:
            # The worker's own metrics (PORTAL_WORKER_METRICS_PORT), scraped by the PodMonitor.
            - name: metrics
              containerPort: 9808
              protocol: TCP
          envFrom:
            - configMapRef:
                name: gpu-portal-config
          env:
            {{- include "gpu-portal.secretEnv" (dict "root" $root "metrics" true) | nindent 12 }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          {{- include "gpu-portal.containerSecurityContext" $root | nindent 10 }}
          {{- include "gpu-portal.volumeMounts" (dict "root" $root "kubeconfigs" .token) | nindent 10 }}
      {{- include "gpu-portal.volumes" (dict "root" $root "kubeconfigs" .token) | nindent 6 }}
{{- end }}
