"""Checks tessera's Kubernetes manifests and renders what podman 4.3's `kube play` can run of them.

    python3 deploy/kubernetes/play.py check tessera.yaml secrets.yaml
    python3 deploy/kubernetes/play.py render tessera.yaml secrets.yaml OUT_DIR --nodes node1,node2 \
        --coordinator-ip IP [--set KEY=VALUE ...]

check: every object is well formed and its references resolve — Services select a workload and
target its container ports, the StatefulSet names its Service, selectors match their templates,
every volume mount has a volume, secret volumes name Secrets, claims name PersistentVolumeClaims (or
the StatefulSet's claim templates), configMapKeyRef keys exist, probes probe declared ports, and
every $(VAR) in a command line is an environment variable of its container.

check also refuses a pod that runs as root, without the runtime's default seccomp profile, or a
container that may escalate privileges or keeps a capability, and a worker pod that mounts more than
its own node's key (tessera-worker-tls-NODE, mounted only by a workload pinned to NODE).

render: podman 4.3 plays Pods, Deployments and PersistentVolumeClaims only. So the StatefulSet's pod
template becomes the Pod tessera-coordinator-0 and a DaemonSet one Pod per --nodes entry (a DaemonSet
pinned to a node by kubernetes.io/hostname: one Pod named after it, when that node is listed), as the
controllers would make them: NODE_NAME from the node, configMapKeyRef values from the ConfigMap (with
--set overrides: a CPU demo offers cpu:1 and no nvidia.com/gpu), $(VAR) expanded, Secrets written to
OUT_DIR/secrets/NAME and mounted from there (owned by the pods' user), claims as directories under
OUT_DIR/volumes, host networking replaced by the demo's own container network (a hostAlias resolves
the coordinator's Service name; container ports are not published on this host: each pod is reached
at its address). Probes are checked but not played (podman runs httpGet probes with
curl, which the image does not have); the demo scrapes every /metrics itself. Writes OUT_DIR/play.yaml
and prints which kinds were played and which only checked.
"""
import argparse
import base64
import copy
import os
import re
import sys

import yaml

PLAYED_AS_PODS = ("StatefulSet", "DaemonSet")
CHECKED_ONLY = ("Service", "ConfigMap", "Secret", "PersistentVolumeClaim")
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def load(paths):
    objects = []
    for path in paths:
        with open(path) as f:
            objects += [o for o in yaml.safe_load_all(f) if o]
    return objects


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def check(objects):
    errors = []
    for i, o in enumerate(objects):
        for field in ("apiVersion", "kind", "metadata"):
            if field not in o:
                errors.append(f"object {i}: no {field}")
        if "metadata" in o and not o["metadata"].get("name"):
            errors.append(f"object {i} ({o.get('kind')}): no metadata.name")
        if o.get("kind") not in PLAYED_AS_PODS + CHECKED_ONLY:
            errors.append(f"object {i}: kind {o.get('kind')} is not one tessera's manifests use")
    if errors:
        return errors
    config = by_kind(objects, "ConfigMap")
    secrets = by_kind(objects, "Secret")
    claims = by_kind(objects, "PersistentVolumeClaim")
    services = by_kind(objects, "Service")
    workloads = {**by_kind(objects, "StatefulSet"), **by_kind(objects, "DaemonSet")}
    for name, w in workloads.items():
        spec = w["spec"]
        template = spec["template"]
        labels = template["metadata"].get("labels", {})
        for k, v in spec["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                errors.append(f"{w['kind']} {name}: selector {k}={v} does not match its template's labels")
        if w["kind"] == "StatefulSet" and spec.get("serviceName") not in services:
            errors.append(f"StatefulSet {name}: serviceName {spec.get('serviceName')} is not a Service")
        templates = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        for v in volumes.values():
            if "secret" in v and v["secret"]["secretName"] not in secrets:
                errors.append(f"{name}: volume {v['name']}: no Secret {v['secret']['secretName']}")
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in claims:
                errors.append(f"{name}: volume {v['name']}: no PersistentVolumeClaim "
                              f"{v['persistentVolumeClaim']['claimName']}")
        # Least privilege: a non-root user, the runtime's default seccomp profile, and per container no
        # privilege escalation and no capabilities.
        pod_security = template["spec"].get("securityContext", {})
        if not pod_security.get("runAsNonRoot"):
            errors.append(f"{name}: securityContext.runAsNonRoot is not true")
        if pod_security.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            errors.append(f"{name}: securityContext.seccompProfile.type is not RuntimeDefault")
        # A worker's key authorises its node's name: a pod mounts at most one node's Secret, and only
        # when it is pinned to that node.
        pinned = template["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname")
        node_secrets = [v["secret"]["secretName"] for v in volumes.values()
                        if "secret" in v and v["secret"]["secretName"].startswith("tessera-worker-tls")]
        if len(node_secrets) > 1:
            errors.append(f"{name}: mounts several nodes' keys: {', '.join(node_secrets)}")
        for secret in node_secrets:
            if secret != f"tessera-worker-tls-{pinned}":
                errors.append(f"{name}: mounts {secret} but is pinned to node {pinned or '(none)'}: "
                              "a worker pod mounts its own node's key alone")
        for c in template["spec"]["containers"]:
            security = c.get("securityContext", {})
            if security.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{name}/{c['name']}: securityContext.allowPrivilegeEscalation is not false")
            if "ALL" not in security.get("capabilities", {}).get("drop", []):
                errors.append(f"{name}/{c['name']}: securityContext.capabilities.drop does not drop ALL")
            ports = {p["containerPort"] for p in c.get("ports", [])}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes and m["name"] not in templates:
                    errors.append(f"{name}/{c['name']}: mount {m['name']} has no volume")
            for probe in ("readinessProbe", "livenessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if probe in c and port not in ports:
                    errors.append(f"{name}/{c['name']}: {probe} probes port {port}, not a container port")
            env = set()
            for e in c.get("env", []):
                env.add(e["name"])
                ref = e.get("valueFrom", {}).get("configMapKeyRef")
                if ref and ref["key"] not in config.get(ref["name"], {}).get("data", {}):
                    errors.append(f"{name}/{c['name']}: env {e['name']}: no key {ref['key']} in {ref['name']}")
            for arg in c.get("command", []) + c.get("args", []):
                for var in VAR.findall(arg):
                    if var not in env:
                        errors.append(f"{name}/{c['name']}: $({var}) is not an environment variable")
    for name, s in services.items():
        targets = [w for w in workloads.values()
                   if all(w["spec"]["template"]["metadata"].get("labels", {}).get(k) == v
                          for k, v in s["spec"]["selector"].items())]
        if not targets:
            errors.append(f"Service {name}: selects no workload")
            continue
        ports = {p["containerPort"] for w in targets for c in w["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        for p in s["spec"]["ports"]:
            if p["targetPort"] not in ports:
                errors.append(f"Service {name}: targetPort {p['targetPort']} is no container's port")
    return errors


def render(objects, out, nodes, coordinator_ip, overrides, uid=10001):
    config = {}
    for c in by_kind(objects, "ConfigMap").values():
        config[c["metadata"]["name"]] = dict(c.get("data", {}), **overrides)
    secret_dirs = {}
    for name, s in by_kind(objects, "Secret").items():
        d = os.path.join(out, "secrets", name)
        os.makedirs(d, exist_ok=True)
        for key, value in s.get("data", {}).items():
            path = os.path.join(d, key)
            with open(path, "wb") as f:
                f.write(base64.b64decode(value))
            os.chmod(path, 0o400)
            os.chown(path, uid, uid)
        os.chmod(d, 0o500)
        os.chown(d, uid, uid)
        secret_dirs[name] = d

    def directory(name):
        d = os.path.join(out, "volumes", name)
        os.makedirs(d, exist_ok=True)
        os.chown(d, uid, uid)
        return d

    def pod(name, workload, node=None):
        spec = copy.deepcopy(workload["spec"]["template"]["spec"])
        for key in ("hostNetwork", "dnsPolicy", "nodeSelector", "terminationGracePeriodSeconds"):
            spec.pop(key, None)
        spec["hostAliases"] = [{"ip": coordinator_ip, "hostnames": ["tessera-coordinator"]}]
        claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        volumes = []
        for v in spec.get("volumes", []):
            if "secret" in v:
                volumes.append({"name": v["name"], "hostPath": {"path": secret_dirs[v["secret"]["secretName"]]}})
            elif "persistentVolumeClaim" in v:
                volumes.append({"name": v["name"],
                                "hostPath": {"path": directory(v["persistentVolumeClaim"]["claimName"])}})
            elif "emptyDir" in v and v["emptyDir"].get("medium") == "Memory":
                continue  # /dev/shm: podman gives every container its own.
            elif "emptyDir" in v:
                volumes.append({"name": v["name"], "hostPath": {"path": directory(f"{name}-{v['name']}")}})
            else:
                volumes.append(v)
        for claim in claims:
            volumes.append({"name": claim, "hostPath": {"path": directory(f"{claim}-{name}")}})
        spec["volumes"] = volumes
        kept = {v["name"] for v in volumes}
        for c in spec["containers"]:
            c.pop("readinessProbe", None)
            c.pop("livenessProbe", None)
            c.pop("ports", None)  # podman 4.3 would publish them on this host; pods are reached by address.
            c.get("resources", {}).get("limits", {}).pop("nvidia.com/gpu", None)
            c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] in kept]
            env = {}
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "fieldRef" in ref:
                    env[e["name"]] = node or name
                elif "configMapKeyRef" in ref:
                    env[e["name"]] = config[ref["configMapKeyRef"]["name"]][ref["configMapKeyRef"]["key"]]
                else:
                    env[e["name"]] = e.get("value", "")
            c["env"] = [{"name": k, "value": v} for k, v in env.items()]
            for field in ("command", "args"):
                if field in c:
                    c[field] = [VAR.sub(lambda m: env[m.group(1)], a) for a in c[field]]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": workload["spec"]["template"]["metadata"].get("labels", {})},
                "spec": spec}

    pods = []
    for name, w in by_kind(objects, "StatefulSet").items():
        for i in range(w["spec"].get("replicas", 1)):
            pods.append(pod(f"{name}-{i}", w))
    for name, w in by_kind(objects, "DaemonSet").items():
        pinned = w["spec"]["template"]["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname")
        if pinned is not None:  # One node's worker: its pod, when that node is one of --nodes.
            if pinned in nodes:
                pods.append(pod(name, w, pinned))
            continue
        for node in nodes:
            pods.append(pod(f"{name}-{node}", w, node))
    with open(os.path.join(out, "play.yaml"), "w") as f:
        yaml.safe_dump_all(pods, f, sort_keys=False)
    kinds = sorted({o["kind"] for o in objects})
    print("played (as the Pods their controllers make): " + ", ".join(k for k in kinds if k in PLAYED_AS_PODS))
    print("checked only (podman 4.3 does not play them): " + ", ".join(k for k in kinds if k in CHECKED_ONLY))
    print("pods: " + ", ".join(p["metadata"]["name"] for p in pods))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["check", "render"])
    p.add_argument("files", nargs="+")
    p.add_argument("--nodes", default="")
    p.add_argument("--coordinator-ip", default="")
    p.add_argument("--set", action="append", default=[])
    a = p.parse_args()
    files, out = (a.files, None) if a.mode == "check" else (a.files[:-1], a.files[-1])
    objects = load(files)
    errors = check(objects)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(objects)} objects checked: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    if a.mode == "render":
        overrides = dict(s.split("=", 1) for s in a.set)
        render(objects, out, [n for n in a.nodes.split(",") if n], a.coordinator_ip, overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
