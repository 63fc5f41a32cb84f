#!/usr/bin/env bash
# The main job on local clusters: two clusters, liqo on both, rome consuming from milan.
set -euo pipefail
liqoctl=${LIQOCTL:-.venv/bin/liqoctl}

kubeconfig_of() { (eval "$($liqoctl local env "$1")"; echo "$KUBECONFIG"); }

for cluster in rome milan; do
  $liqoctl local up "$cluster"
done
ROME=$(kubeconfig_of rome)
MILAN=$(kubeconfig_of milan)
eval "$($liqoctl local env rome)"   # PATH: the kubectl matching the clusters

for cluster in rome milan; do
  echo; echo "== nodes of $cluster"
  kubectl --kubeconfig "$(kubeconfig_of "$cluster")" get nodes -o wide
done

for cluster in rome milan; do
  echo; echo "== installing liqo on $cluster"
  $liqoctl install --kubeconfig "$(kubeconfig_of "$cluster")"
done

echo; echo "== peering rome -> milan"
$liqoctl peer --kubeconfig "$ROME" --remote-kubeconfig "$MILAN"

echo; echo "== rome: the ForeignCluster for milan"
kubectl --kubeconfig "$ROME" get foreignclusters
echo; echo "== rome: the offer milan made, accepted"
kubectl --kubeconfig "$ROME" get resourceoffers -A
echo; echo "== rome: the virtual node it produced"
kubectl --kubeconfig "$ROME" get virtualnodes -A
echo; $liqoctl info --kubeconfig "$ROME"
