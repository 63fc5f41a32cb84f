"""The home ServiceAccount token of every offloaded pod, kept live in a Secret of its twin.

A pod on the provider talks to the home API server with its home ServiceAccount's token. For each pod with
the projected ServiceAccount volume, a TokenRequest at home bound to the pod is written with the home CA and
namespace into a pod-token Secret in the twin, which the ShadowPod mounts in place of the projected volume
(:func:`liqo.virtualkubelet.forge.pods.remote_pod_spec`). Renewed at 80% of its lifetime by a delayed
re-queue, deleted once the home pod is gone (the token itself dies with the pod: it is bound to it).

Only pods that mount a home token get one: a pod without the projected volume (``automountServiceAccountToken:
false`` on the pod or its ServiceAccount, which the home admission honours) costs neither a TokenRequest nor
a Secret.

The Secret is written alongside the ShadowPod, not before it: a provider's kubelet that reaches the pod's
volumes first retries the mount (after 0.5 s, doubling). This reflector has as many workers as the pod
reflector so that the Secret keeps pace with a rollout (with 2, 86% of a 1 000-pod rollout's Secrets were
written after their pods were Running on KWOK: minutes of ``ContainerCreating`` on a real node). Making the
ShadowPod wait for its Secret was measured: +0.9 s median startup at 100 pods, not yet explained, so not done.

One key per home pod (``namespace/name``). A pod-token Secret is created, then replaced at the cached
resourceVersion when its token is renewed (:func:`~liqo.virtualkubelet.reflection.copies.converge_copy`): one
write each, where a server-side apply costs the API server a merge and a managedFields entry. A create that
finds the Secret there (the cache behind, after a restart) waits for the cache, whose event re-queues the pod.
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable

from liqo.kube.controller import Result
from liqo.kube.errors import ApiError
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.projection import keep
from liqo.kube.resources import CONFIGMAPS, SECRETS, SERVICE_ACCOUNTS, object_key, split_namespaced_key
from liqo.kube.timefmt import parse_time
from liqo.virtualkubelet.forge import configdata, tokens
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector
from liqo.virtualkubelet.reflection.steps import converge_copy, delete_copy

log = logging.getLogger(__name__)

TOKEN_RETRY_SECONDS = 30.0
"""A refused TokenRequest (ServiceAccount missing, RBAC) is tried again this often."""


TOKEN_SECRET_FIELDS = keep("metadata", "type", "immutable")
"""All that is read of a pod-token Secret: whose it is and when to renew it (its annotations), and whether a
renewal may replace it in place (:func:`~liqo.virtualkubelet.forge.configdata.must_replace`); never its token."""


def token_secrets(pair: NamespacePair) -> Informer:
    """The twin's pod-token Secrets, metadata only."""
    return pair.remote(SECRETS, label_selector=tokens.TOKEN_SECRETS, projection=TOKEN_SECRET_FIELDS)


class TokenReflector(Reflector[str]):
    """Keeps a live home token in the twin for every pod bound to one virtual node."""

    def __init__(
        self,
        *,
        manager: ReflectionManager,
        home_pods: Informer,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        workers: int = 32,
    ) -> None:
        """``home_pods`` is the pod reflector's informer (the pods bound to the node): the keys come from it.

        As many ``workers`` as the pod reflector's: every new pod with a token needs one.
        """
        super().__init__(manager, reflects="tokens", workers=workers)
        self._home_pods = home_pods
        self._clock = clock
        self.controller.watch(home_pods, lambda pod: [object_key(pod)])

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch the pod-token Secrets in the twin, and the home CA (in every pod-token Secret)."""
        home_namespace = pair.home_namespace

        def ca_users(configmap: Obj) -> list[str]:
            if configmap["metadata"]["name"] != configdata.ROOT_CA_CONFIGMAP:
                return []
            return self._pods_in(home_namespace)

        owner = functools.partial(
            tokens.token_owner_keys, home_namespace=home_namespace, home_cluster_id=self._home_cluster_id
        )
        self.controller.watch(token_secrets(pair), owner)
        self.controller.watch(pair.home(CONFIGMAPS), ca_users)

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Reconcile the namespace's pods again with every cache listed."""
        for key in self._pods_in(pair.home_namespace):
            self.controller.queue.add(key)

    def namespaces_changed(self) -> None:
        """Pods waiting for a twin may get their token now."""
        for pod in self._home_pods.store.list():
            self.controller.queue.add(object_key(pod))

    def _pods_in(self, namespace: str) -> list[str]:
        return [object_key(p) for p in self._home_pods.store.list() if p["metadata"]["namespace"] == namespace]

    async def reconcile(self, key: str) -> Result | None:
        """Keep the pod-token Secret of home pod ``key`` holding a live home token (or delete it)."""
        namespace, name = split_namespaced_key(key)
        pair = self._manager.pair(namespace)
        if pair is None or not pair.synced:
            return None  # no twin (yet): namespaces_changed or namespace_synced re-queues it
        home = self._home_pods.store.get(key)
        secret_name = tokens.token_secret_name(name)
        current = token_secrets(pair).store.get(f"{pair.twin}/{secret_name}")
        if current is not None and not tokens.is_pod_token(current, home_cluster_id=self._home_cluster_id):
            log.warning("%s/%s on the provider is not a pod-token Secret of ours: left alone", pair.twin, secret_name)
            return None
        volume = tokens.token_volume(home["spec"]) if home is not None else None
        if home is None or volume is None:
            if current is not None:
                await delete_copy(self._provider, SECRETS, current)
            return None
        root_ca = pair.home(CONFIGMAPS).store.get(f"{namespace}/{configdata.ROOT_CA_CONFIGMAP}")
        ca = ((root_ca or {}).get("data") or {}).get("ca.crt")
        if ca is None:
            return None  # published by the controller manager shortly; its arrival re-queues the namespace's pods
        now = self._clock()
        renew_at = tokens.token_renew_at(current, home, ca=ca) if current is not None else None
        if renew_at is not None and renew_at > now:
            return Result(requeue_after=(renew_at - now).total_seconds())
        try:
            answer = await self._home.request(
                "POST",
                SERVICE_ACCOUNTS.path(namespace=namespace, name=tokens.service_account_of(home), subresource="token"),
                body=tokens.token_request(home, seconds=tokens.token_seconds(volume)),
            )
        except ApiError as exc:
            # The ServiceAccount is missing or we may not ask: say so on the pod and try again later. (A 404 may
            # also mean the pod went meanwhile; then its deletion re-queues us and the retry finds nothing to do.)
            if exc.status not in (400, 403, 404, 422):
                raise
            await self._events.record(
                {"apiVersion": "v1", "kind": "Pod", **home},
                type="Warning",
                reason="TokenRequestFailed",
                message=exc.message,
            )
            return Result(requeue_after=TOKEN_RETRY_SECONDS)
        renew_at = tokens.renewal_time(issued=now, expires=parse_time(answer["status"]["expirationTimestamp"]))
        secret = tokens.token_secret(
            home,
            namespace=pair.twin,
            home_cluster_id=self._home_cluster_id,
            token=answer["status"]["token"],
            ca=ca,
            renew_at=renew_at,
        )
        await converge_copy(
            self._provider,
            SECRETS,
            current=current,
            desired=secret,
            is_current=configdata.copy_is_current,
            must_replace=configdata.must_replace,
        )
        return Result(requeue_after=max((renew_at - now).total_seconds(), 1.0))
