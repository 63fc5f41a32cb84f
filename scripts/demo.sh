#!/usr/bin/env bash
# The main job on local clusters: two clusters, liqo on both, rome consuming from milan.
set -euo pipefail
liqoctl=${LIQOCTL:-.venv/bin/liqoctl}

kubeconfig_of() { (eval "$($liqoctl local env "$1")"; echo "$KUBECONFIG"); }

# Both clusters use the same pod CIDR: the network fabric (a WireGuard gateway per peer, double NAT) lets
# their pods reach each other anyway, each side seeing the other's pods at a block of its own choosing
# (docs/network.md). Each has one real node (a kubelet, containerd and runc in namespaces of this machine):
# liqo runs there as pods, and so do the offloaded pods.
$liqoctl local up rome --pod-cidr 10.244.0.0/16 --nodes 0 --real-nodes 1
$liqoctl local up milan --pod-cidr 10.244.0.0/16 --nodes 0 --real-nodes 1
ROME=$(kubeconfig_of rome)
MILAN=$(kubeconfig_of milan)
eval "$($liqoctl local env rome)"   # PATH: the kubectl matching the clusters

for cluster in rome milan; do
  echo; echo "== nodes of $cluster"
  kubectl --kubeconfig "$(kubeconfig_of "$cluster")" get nodes -o wide
done

for cluster in rome milan; do
  echo; echo "== installing liqo on $cluster"
  # --discovery: announce the cluster on the real nodes' LAN, and hear the others there.
  $liqoctl install --discovery --kubeconfig "$(kubeconfig_of "$cluster")"
done

echo; echo "== milan: liqo runs as pods on its real node, from the image built here (the same on rome)"
kubectl --kubeconfig "$MILAN" get pods -n liqo -o wide

echo; echo "== rome hears milan on the LAN (multicast DNS): a ForeignCluster, not peered yet"
kubectl --kubeconfig "$ROME" wait --for=create foreignclusters/milan --timeout=60s >/dev/null
$liqoctl discover --kubeconfig "$ROME"
kubectl --kubeconfig "$ROME" get foreignclusters -o wide

echo; echo "== peering rome -> milan (the discovered record becomes the peering's)"
$liqoctl peer --kubeconfig "$ROME" --remote-kubeconfig "$MILAN"

echo; echo "== rome: the ForeignCluster for milan"
kubectl --kubeconfig "$ROME" get foreignclusters
echo; echo "== rome: the offer milan made, accepted"
kubectl --kubeconfig "$ROME" get resourceoffers -A
echo; echo "== rome: the virtual node it produced"
kubectl --kubeconfig "$ROME" get virtualnodes -A
echo; $liqoctl info --kubeconfig "$ROME"
echo; echo "== the network fabric: each side's NetworkConfig (where it sees the other's pods) and the tunnel"
# The gateways connect within seconds of the peering.
kubectl --kubeconfig "$ROME" wait foreignclusters --all --timeout=60s \
  --for=jsonpath='{.status.conditions[?(@.type=="NetworkStatus")].status}'=Established >/dev/null
kubectl --kubeconfig "$ROME" get networkconfigs -A
kubectl --kubeconfig "$ROME" get pods -n liqo -l liqo.io/component=gateway -o wide

echo; echo "== rome: the virtual node standing for milan"
kubectl --kubeconfig "$ROME" get nodes -o wide

echo; echo "== offloading namespace demo to milan (pods run remotely only)"
kubectl --kubeconfig "$ROME" create namespace demo --dry-run=client -o yaml | kubectl --kubeconfig "$ROME" apply -f -
$liqoctl offload namespace demo --pod-offloading-strategy Remote --kubeconfig "$ROME"

echo; echo "== a sample app in rome: a ConfigMap, a Deployment of 3 replicas, a Service"
kubectl --kubeconfig "$ROME" apply -n demo -f "$(dirname "$0")/../examples/demo-app.yaml"
kubectl --kubeconfig "$ROME" rollout status -n demo deployment/web --timeout=120s

TWIN=$(kubectl --kubeconfig "$ROME" get namespaceoffloading offloading -n demo -o jsonpath='{.status.remoteNamespaceName}')
echo; echo "== rome: the pods, bound to the virtual node (their IPs as rome reaches them: milan's, remapped)"
kubectl --kubeconfig "$ROME" get pods -n demo -o wide
echo; echo "== milan: the same pods, Running on its real node in namespace $TWIN"
kubectl --kubeconfig "$MILAN" get pods -n "$TWIN" -o wide
echo; echo "== rome: the Service's endpoints, the offloaded pods at the addresses rome reaches them at"
kubectl --kubeconfig "$ROME" get endpointslices -n demo -o wide
echo; echo "== milan: the Service copied into $TWIN (its own cluster IP), and its endpoints there"
kubectl --kubeconfig "$MILAN" get services,endpointslices -n "$TWIN" -o wide
echo; echo "== rome: kubectl logs of an offloaded pod (served through the virtual kubelet)"
POD=$(kubectl --kubeconfig "$ROME" get pods -n demo -l app=web --field-selector=status.phase=Running \
  -o jsonpath='{.items[0].metadata.name}')
kubectl --kubeconfig "$ROME" logs -n demo "$POD" --tail=5
echo; echo "== rome: kubectl exec into an offloaded pod, which asks milan's copy of the Service"
WEB_IP=$(kubectl --kubeconfig "$MILAN" get service web -n "$TWIN" -o jsonpath='{.spec.clusterIP}')
# Retries: milan's kube-proxy programs the Service moments after its pods became Ready.
for _ in 1 2 3; do
  kubectl --kubeconfig "$ROME" exec -n demo "$POD" -- curl -s -m 3 --retry 10 --retry-all-errors --retry-delay 1 "http://$WEB_IP/"
done

echo; echo "== liqoctl test network: pods on rome's and milan's real nodes, ICMP/TCP/UDP both ways through the tunnel"
$liqoctl test network --kubeconfig "$ROME"
