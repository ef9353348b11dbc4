"""deploy/: every YAML and JSON file parses; the Kubernetes objects, the docker-compose demo
and the shipped nackguard configs hold together (names, ports, probes, mounts, ConfigMap
keys), and the configs pass `nackguard --check-config`."""

import json
import os
import re
import unittest

import yaml

from deploy_support import (DEPLOY, REPO, check_config, load_all, load_one, nackguard_bin,
                            path, read)

K8S_DIR = ("deploy", "kubernetes")
NACKGUARD_CONTAINER = "nackguard"


def k8s_objects():
    objects = []
    for name in sorted(os.listdir(path(*K8S_DIR))):
        if name.endswith((".yaml", ".yml")) and name != "kustomization.yaml":
            for doc in load_all(*K8S_DIR, name):
                objects.append((name, doc))
    return objects


def by_kind(kind):
    return [doc for _, doc in k8s_objects() if doc.get("kind") == kind]


def pod_containers(deployment):
    spec = deployment["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def sidecar(deployment):
    found = [c for c in pod_containers(deployment) if c["name"] == NACKGUARD_CONTAINER]
    assert len(found) == 1, "the pod needs exactly one container named nackguard"
    return found[0]


def cpu_millis(value):
    text = str(value)
    return float(text[:-1]) if text.endswith("m") else float(text) * 1000


def memory_bytes(value):
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]i?)?", str(value))
    assert match, f"cannot read the memory quantity {value!r}"
    return float(match.group(1)) * units.get(match.group(2) or "", 1)


def sidecar_config(configmap):
    return yaml.safe_load(configmap["data"]["nackguard.yaml"])


class EveryFileParses(unittest.TestCase):
    def test_every_yaml_and_json_file_under_deploy_parses(self):
        seen = 0
        for root, _dirs, files in os.walk(DEPLOY):
            for name in files:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, REPO)
                with self.subTest(file=rel):
                    with open(full) as f:
                        if name.endswith((".yaml", ".yml")):
                            docs = [d for d in yaml.safe_load_all(f) if d is not None]
                            self.assertTrue(docs, f"{rel} holds no YAML document")
                        elif name.endswith(".json"):
                            self.assertIsInstance(json.load(f), dict, rel)
                        else:
                            continue
                    seen += 1
        self.assertGreaterEqual(seen, 10, "fewer YAML/JSON files under deploy/ than expected")


class KubernetesObjects(unittest.TestCase):
    def test_every_object_has_api_version_kind_and_name(self):
        objects = k8s_objects()
        self.assertTrue(objects)
        for file_name, doc in objects:
            with self.subTest(file=file_name, kind=doc.get("kind")):
                self.assertTrue(doc.get("apiVersion"), "apiVersion")
                self.assertTrue(doc.get("kind"), "kind")
                self.assertTrue((doc.get("metadata") or {}).get("name"), "metadata.name")
        kinds = {doc["kind"] for _, doc in objects}
        self.assertLessEqual({"Deployment", "ConfigMap", "PodMonitor"}, kinds)

    def test_kustomization_lists_every_manifest(self):
        kustomization = load_one(*K8S_DIR, "kustomization.yaml")
        files = {name for name in os.listdir(path(*K8S_DIR))
                 if name.endswith(".yaml") and name != "kustomization.yaml"}
        self.assertEqual(set(kustomization["resources"]), files)

    def test_deployment_selects_its_pods(self):
        for deployment in by_kind("Deployment"):
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            for key, value in deployment["spec"]["selector"]["matchLabels"].items():
                self.assertEqual(labels.get(key), value, f"selector label {key}")

    def test_every_container_has_an_image_and_resources(self):
        for deployment in by_kind("Deployment"):
            for container in pod_containers(deployment):
                with self.subTest(container=container["name"]):
                    self.assertTrue(container.get("image"), "image")
                    resources = container.get("resources") or {}
                    for kind in ("requests", "limits"):
                        for resource in ("cpu", "memory"):
                            self.assertIn(resource, resources.get(kind) or {},
                                          f"resources.{kind}.{resource}")
                    self.assertLessEqual(cpu_millis(resources["requests"]["cpu"]),
                                         cpu_millis(resources["limits"]["cpu"]))
                    self.assertLessEqual(memory_bytes(resources["requests"]["memory"]),
                                         memory_bytes(resources["limits"]["memory"]))

    def test_sidecar_ports_probes_and_security(self):
        for deployment in by_kind("Deployment"):
            container = sidecar(deployment)
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            self.assertEqual(ports, {"amqp": 5673, "metrics": 9464})
            for probe, expected in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                with self.subTest(probe=probe):
                    get = container[probe]["httpGet"]
                    self.assertEqual(get["path"], expected)
                    self.assertEqual(get["port"], "metrics", "probe the named metrics port")
            if "startupProbe" in container:
                self.assertEqual(container["startupProbe"]["httpGet"]["path"], "/healthz")
            if container in deployment["spec"]["template"]["spec"].get("initContainers", []):
                self.assertEqual(container.get("restartPolicy"), "Always",
                                 "an init container is a sidecar only with restartPolicy Always")
            security = container.get("securityContext") or {}
            self.assertTrue(security.get("runAsNonRoot"))
            self.assertNotEqual(security.get("runAsUser"), 0)
            self.assertFalse(security.get("allowPrivilegeEscalation", True))

    def test_volumes_reference_existing_configmap_keys(self):
        configmaps = {c["metadata"]["name"]: c for c in by_kind("ConfigMap")}
        checked = 0
        for deployment in by_kind("Deployment"):
            for volume in deployment["spec"]["template"]["spec"].get("volumes", []):
                if "configMap" not in volume:
                    continue
                name = volume["configMap"]["name"]
                self.assertIn(name, configmaps, f"volume {volume['name']}: no ConfigMap {name}")
                data = configmaps[name].get("data", {})
                for item in volume["configMap"].get("items", []):
                    self.assertIn(item["key"], data, f"ConfigMap {name} has no key {item['key']}")
                    checked += 1
                mounts = [m for c in pod_containers(deployment)
                          for m in c.get("volumeMounts", []) if m["name"] == volume["name"]]
                self.assertTrue(mounts, f"volume {volume['name']} is mounted nowhere")
        self.assertGreater(checked, 0)

    def test_sidecar_config_matches_the_pod(self):
        for deployment in by_kind("Deployment"):
            container = sidecar(deployment)
            volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"]
                          if v["name"] == container["volumeMounts"][0]["name"])
            mount = container["volumeMounts"][0]["mountPath"]
            configmap = next(c for c in by_kind("ConfigMap")
                             if c["metadata"]["name"] == volume["configMap"]["name"])
            files = {os.path.join(mount, i["path"]): i["key"] for i in volume["configMap"]["items"]}
            config_file = container["args"][container["args"].index("--config") + 1]
            self.assertIn(config_file, files, "--config names a file the ConfigMap provides")
            config = yaml.safe_load(configmap["data"][files[config_file]])
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            self.assertEqual(config["listen"]["port"], ports["amqp"])
            self.assertEqual(config["metrics"]["port"], ports["metrics"])
            self.assertEqual(config["metrics"]["address"], "0.0.0.0",
                             "the kubelet's probes and Prometheus reach the pod IP")
            policies = [f for f in files if os.path.dirname(f) == config["policies_dir"]]
            self.assertTrue(policies, "policies_dir holds the ConfigMap's policy files")
            grace = int(re.fullmatch(r"(\d+)s", config["shutdown"]["grace"]).group(1))
            self.assertLess(grace, deployment["spec"]["template"]["spec"].get(
                "terminationGracePeriodSeconds", 30))
            # The consumer is pointed at the sidecar on the pod's loopback.
            urls = [e["value"] for c in pod_containers(deployment) if c is not container
                    for e in c.get("env", []) if e["name"] == "AMQP_URL"]
            self.assertTrue(urls, "the consumer gets AMQP_URL")
            for url in urls:
                self.assertRegex(url, rf"@(localhost|127\.0\.0\.1):{ports['amqp']}/")

    @unittest.skipUnless(nackguard_bin(), "NACKGUARD_BIN is not built")
    def test_configmap_passes_check_config(self):
        for configmap in by_kind("ConfigMap"):
            data = configmap["data"]
            policies = {k: v for k, v in data.items() if k != "nackguard.yaml"}
            code, output = check_config(data["nackguard.yaml"], policies)
            self.assertEqual(code, 0, output)
            for name in policies:
                self.assertIn(yaml.safe_load(data[name])["queue"], output)

    def test_podmonitor_scrapes_the_sidecar(self):
        deployments = by_kind("Deployment")
        for monitor in by_kind("PodMonitor"):
            self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
            wanted = monitor["spec"]["selector"]["matchLabels"]
            matched = [d for d in deployments if wanted.items() <=
                       d["spec"]["template"]["metadata"]["labels"].items()]
            self.assertTrue(matched, "the PodMonitor selects no pod of the Deployment")
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                self.assertEqual(endpoint["path"], "/metrics")
                for deployment in matched:
                    names = {p["name"] for p in sidecar(deployment)["ports"]}
                    self.assertIn(endpoint["port"], names)


class ComposeDemo(unittest.TestCase):
    def setUp(self):
        self.compose = load_one("deploy", "docker-compose.yaml")
        self.services = self.compose["services"]

    def test_services(self):
        self.assertEqual(self.services["rabbitmq"]["image"], "rabbitmq:3.10-management")
        self.assertEqual(self.services["prometheus"]["image"].split(":")[0], "prom/prometheus")
        build = self.services["nackguard"]["build"]
        self.assertEqual(os.path.normpath(os.path.join(DEPLOY, build["context"])), REPO)
        self.assertEqual(build["dockerfile"], "deploy/Dockerfile")
        self.assertIn("consumer", self.services)

    def test_consumer_goes_through_nackguard(self):
        url = self.services["consumer"]["environment"]["AMQP_URL"]
        self.assertRegex(url, r"@nackguard:5673/")
        self.assertRegex(self.services["publisher"]["environment"]["AMQP_URL"], r"@rabbitmq:5672/")

    def test_mounted_and_built_paths_exist(self):
        for name, service in self.services.items():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("."):
                    with self.subTest(service=name, volume=volume):
                        self.assertTrue(os.path.exists(os.path.join(DEPLOY, source)), source)
            build = service.get("build")
            if isinstance(build, str):
                self.assertTrue(os.path.isfile(os.path.join(DEPLOY, build, "Dockerfile")))

    def test_prometheus_loads_the_alert_rules(self):
        mounts = dict(v.split(":")[:2] for v in self.services["prometheus"]["volumes"])
        self.assertEqual(mounts.get("./prometheus/alerts.yaml"), "/etc/prometheus/alerts.yaml")
        config = load_one("deploy", "prometheus", "prometheus.yml")
        self.assertIn("alerts.yaml", config["rule_files"])
        targets = [t for job in config["scrape_configs"] for sc in job["static_configs"]
                   for t in sc["targets"]]
        self.assertIn("nackguard:9464", targets)

    def test_demo_scripts_compile(self):
        for script in ("naive_consumer.py", "publisher.py"):
            compile(read("deploy", "demo", script), script, "exec")

    def test_image_config_reaches_the_compose_broker(self):
        config = load_one("deploy", "docker", "nackguard.yaml")
        self.assertEqual(config["upstream"]["host"], "rabbitmq")
        self.assertEqual(config["listen"], {"address": "0.0.0.0", "port": 5673})
        self.assertEqual(config["metrics"], {"address": "0.0.0.0", "port": 9464})
        self.assertEqual(config["policies_dir"], "/etc/nackguard/policies")

    @unittest.skipUnless(nackguard_bin(), "NACKGUARD_BIN is not built")
    def test_image_config_and_demo_policy_pass_check_config(self):
        policies = {name: read("deploy", "demo", "policies", name)
                    for name in os.listdir(path("deploy", "demo", "policies"))}
        policies["default.yaml"] = read("policies", "default.yaml")  # as in the image
        code, output = check_config(read("deploy", "docker", "nackguard.yaml"), policies)
        self.assertEqual(code, 0, output)
        self.assertIn("demo.tasks", output)


if __name__ == "__main__":
    unittest.main()
