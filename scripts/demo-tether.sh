#!/usr/bin/env bash
# A second demo: a laptop's one-node cluster tethers to the enterprise's, which then schedules the laptop's
# workloads; the tether ends and the laptop takes them back. docs/modes.md.
set -euo pipefail
liqoctl=${LIQOCTL:-.venv/bin/liqoctl}

kubeconfig_of() { (eval "$($liqoctl local env "$1")"; echo "$KUBECONFIG"); }

$liqoctl local up laptop --nodes 0 --real-nodes 1
$liqoctl local up enterprise --nodes 0 --real-nodes 1
LAPTOP=$(kubeconfig_of laptop)
CORP=$(kubeconfig_of enterprise)
eval "$($liqoctl local env laptop)"   # PATH: the kubectl matching the clusters
for kc in "$LAPTOP" "$CORP"; do $liqoctl install --kubeconfig "$kc"; done

echo; echo "== both directions: the laptop consumes from the enterprise, and the enterprise from the laptop"
$liqoctl peer --bidirectional --kubeconfig "$LAPTOP" --remote-kubeconfig "$CORP"
cluster_id() { kubectl --kubeconfig "$1" get configmap -n liqo liqo-cluster-identity -o jsonpath='{.data.clusterID}'; }
LAPTOP_ID=$(cluster_id "$LAPTOP")
CORP_ID=$(cluster_id "$CORP")

echo; echo "== the laptop runs a Deployment of its own, on its node"
kubectl --kubeconfig "$LAPTOP" create namespace work
# The tool image every real node of a local cluster preloads (no registry is reached here).
kubectl --kubeconfig "$LAPTOP" create deployment web -n work --image=localhost/liqo/toolbox:1 --replicas=2 \
  -- sh -c 'mkdir -p /tmp/www && echo "answered by $HOSTNAME" > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www'
kubectl --kubeconfig "$LAPTOP" rollout status -n work deployment/web --timeout=120s
kubectl --kubeconfig "$LAPTOP" get pods -n work -o wide

echo; echo "== a tether is refused while the enterprise does not accept tethered clusters (nothing is written)"
if $liqoctl mode tethered --to enterprise --kubeconfig "$LAPTOP"; then echo "unexpected: accepted"; exit 1; fi

echo; echo "== the enterprise accepts the laptop tethering itself"
kubectl --kubeconfig "$CORP" apply -f - <<YAML
apiVersion: sharing.liqo.io/v1alpha1
kind: SharingPolicy
metadata: {name: laptops}
spec: {peers: ["$LAPTOP_ID"], action: Share, tethering: Accept}
YAML
# The enterprise's offer to the laptop says so as soon as it is refreshed.
kubectl --kubeconfig "$LAPTOP" wait resourceoffer "$CORP_ID" -n "liqo-tenant-$CORP_ID" --timeout=120s \
  --for=jsonpath='{.spec.acceptsTethering}'=true >/dev/null

echo; echo "== tethered: the enterprise schedules the laptop's workloads"
$liqoctl mode tethered --to enterprise --kubeconfig "$LAPTOP"
kubectl --kubeconfig "$LAPTOP" get namespaceoffloadings -A
kubectl --kubeconfig "$LAPTOP" rollout status -n work deployment/web --timeout=120s
echo; echo "== the laptop's pods, now bound to the enterprise's virtual node"
kubectl --kubeconfig "$LAPTOP" get pods -n work -o wide
echo; echo "== the enterprise sees the laptop tethered to it"
kubectl --kubeconfig "$CORP" get foreignclusters -o wide
kubectl --kubeconfig "$CORP" get nodes -L liqo.io/tethered-device

echo; echo "== the tether ends: the laptop takes its workloads back"
$liqoctl mode autonomous --kubeconfig "$LAPTOP"
kubectl --kubeconfig "$LAPTOP" rollout status -n work deployment/web --timeout=120s
kubectl --kubeconfig "$LAPTOP" get pods -n work -o wide
$liqoctl mode --kubeconfig "$LAPTOP"
