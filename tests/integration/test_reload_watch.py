"""Automatic reload: nackguard watches its config file's directory and policies_dir (inotify)
and reloads as on SIGHUP when a file there changes, with no signal sent (issue 15).

1. The config and the policies in one Kubernetes ConfigMap volume, laid out as kubelet does
   (a ..<timestamp> directory per version, ..data pointing at the current one, a link per
   entry into ..data; the policies under policies/, as deploy/kubernetes mounts them). An
   update that lowers max_redeliveries 5 -> 1: nackguard_policy_reloads_total{result="ok"}
   goes 0 -> 1 within 2 s and stays 1 (the swap and the old version's removal are one
   reload), one "reload: <volume>/..data (and 2 more) changed; reloading" line, and a new
   poison is dead-lettered after 2 deliveries. Then an update with a broken policy:
   {result="error"} goes to 1, "ok" stays 1, and max_redeliveries 1 stays in force.
2. policies_dir a ConfigMap volume of its own (the policy links at its top), the config file
   beside it replaced by a rename: each change is exactly one reload.
"""
# ctest-variants: quorum rmq40 rmq40.quorum rmq43 rmq43.quorum

import os
import re
import shutil
import time
import uuid

import operations_support as ops
import redelivery_support as rs
from redelivery_support import NO_RATE_LIMITS, props

RELOADS = "nackguard_policy_reloads_total"
# The watch waits for 300 ms of quiet; longer than that, a second reload would have started.
# Not a wait: an observation window, after the awaited reload, in which no second one comes.
SETTLE = 1.0


def policy(queue, max_redeliveries):
    return rs.policy_yaml(queue, max_redeliveries=max_redeliveries, requeue="immediate",
                          rate=NO_RATE_LIMITS)


class ConfigMapVolume:
    """A directory laid out as kubelet mounts a ConfigMap, and updated as kubelet does: the
    new version written to a ..<timestamp> directory, a ..data_tmp link to it renamed over
    ..data (atomic), a link for each new top-level entry, then the old version removed."""

    def __init__(self, path):
        self.path = path
        self.version = None
        self.serial = 0
        os.makedirs(path, exist_ok=True)

    def update(self, files):
        """files: {path relative to the volume ("policies/q.yaml"): text}."""
        self.serial += 1
        name = time.strftime("..%Y_%m_%d_%H_%M_%S.") + str(self.serial)
        for relative, text in files.items():
            full = os.path.join(self.path, name, relative)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        tmp = os.path.join(self.path, "..data_tmp")
        os.symlink(name, tmp)
        os.rename(tmp, os.path.join(self.path, "..data"))
        for top in sorted({relative.split("/")[0] for relative in files}):
            link = os.path.join(self.path, top)
            if not os.path.lexists(link):
                os.symlink(os.path.join("..data", top), link)
        if self.version is not None:
            shutil.rmtree(os.path.join(self.path, self.version))
        self.version = name


class ConfigMapProxy(ops.OpsProxy):
    """An OpsProxy whose config file and policies live in one ConfigMapVolume (<dir>/mount):
    --config <mount>/nackguard.yaml, policies_dir <mount>/policies. write_config() publishes
    the current config and self.policies as a new version of the volume."""

    def __init__(self, policies, **kwargs):
        super().__init__(policies, **kwargs)
        self.volume = None

    def write_config(self):
        if self.volume is None:
            self.volume = ConfigMapVolume(os.path.join(self.dir, "mount"))
            self.config_path = os.path.join(self.volume.path, "nackguard.yaml")
            self.policies_dir = os.path.join(self.volume.path, "policies")
        files = {"nackguard.yaml": self.config_text()}
        files.update({f"policies/{name}": text for name, text in self.policies.items()})
        self.volume.update(files)


class ReloadWatchTest(ops.OpsTest):

    def reloads(self, proxy):
        page = proxy.metrics()
        return page.value(RELOADS, result="ok"), page.value(RELOADS, result="error")

    def wait_reloads(self, proxy, result, want, within):
        """Waits up to `within` s for {result} to reach `want`; returns the seconds it took."""
        started = time.monotonic()
        proxy.wait_metric(RELOADS, want, timeout=within, result=result)
        took = time.monotonic() - started
        self.assertEqual(proxy.metrics().value(RELOADS, result=result), want,
                         f"{RELOADS}{{result={result}}} did not reach {want} within {within} s "
                         f"of the change; reload lines: {proxy.log_lines('reload')}")
        return took

    def changed_lines(self, proxy):
        return [line for line in proxy.log_lines("reload: ") if "changed; reloading" in line]

    def dlq_count(self, queue):
        return self.broker.message_count(f"{queue}.dlq") or 0

    def poison_deliveries(self, consumer, queue, label, dead_letters):
        """Publishes a poison labelled `label`, waits for the DLQ to hold `dead_letters`;
        returns how often the consumer got the poison."""
        message_id = f"{label}-{uuid.uuid4().hex}"
        self.broker.publish(queue, [(label.encode(), props(message_id=message_id))])
        self.assertTrue(rs.poll_until([consumer], lambda: self.dlq_count(queue) >= dead_letters,
                                      timeout=15, quiet=0.3), f"{label} was not dead-lettered")
        return consumer.delivered(label)

    def test_1_configmap_update_reloads_without_a_signal(self):
        queue = self.queue_name("watch-cm")
        proxy = ConfigMapProxy({"q.yaml": policy(queue, 5)}, name="configmap-proxy")
        self._test_proxies.append(proxy)
        self.addCleanup(proxy.cleanup)
        proxy.start()
        self.assertTrue(os.path.islink(proxy.config_path))
        self.broker.declare(queue)
        consumer = self.consumer(proxy, queue, lambda d: "nack", prefetch=10)
        consumer.poll(0.2)
        self.assertEqual(self.reloads(proxy), (0, 0))

        proxy.policies["q.yaml"] = policy(queue, 1)
        proxy.write_config()
        took = self.wait_reloads(proxy, "ok", 1, within=2.0)
        time.sleep(SETTLE)  # observation window (see SETTLE), not a wait
        self.assertEqual(self.reloads(proxy), (1, 0),
                         f"one ConfigMap update, reloads after {took:.2f} s and "
                         f"{SETTLE} s more: {proxy.log_lines('reload')}")
        changed = self.changed_lines(proxy)
        self.assertEqual(len(changed), 1, f"reload lines: {proxy.log_lines('reload')}")
        # After the swap, the old version's policy and directory removed: "(and 2 more)".
        self.assertRegex(changed[0], re.escape(f"reload: {proxy.volume.path}/..data") +
                         r"( \(and \d+ more\))? changed; reloading$")
        self.assertEqual(len(proxy.log_lines("reload: 1 policies loaded from")), 1)
        self.assertEqual(self.poison_deliveries(consumer, queue, "first", 1), 2,
                         "deliveries of a poison after max_redeliveries went to 1")

        proxy.policies["q.yaml"] = f"queue: {queue}\nmax_redeliveries: lots\n"
        proxy.write_config()
        self.wait_reloads(proxy, "error", 1, within=2.0)
        time.sleep(SETTLE)  # observation window (see SETTLE), not a wait
        self.assertEqual(self.reloads(proxy), (1, 1), proxy.log_lines("reload"))
        failed = proxy.log_lines("reload failed, the previous policies stay in force: ")
        self.assertEqual(len(failed), 1, f"reload failure lines: {failed}")
        self.assertIn("q.yaml:2:", failed[0])
        self.assertIn("max_redeliveries", failed[0])
        self.assertEqual(self.poison_deliveries(consumer, queue, "second", 2), 2,
                         "deliveries after the broken update (1 should still apply)")
        self.assertTrue(consumer.ch.is_open and consumer.conn.is_open)
        self.assertTrue(consumer.close())
        self.assert_proxy_alive(proxy)

    def test_2_policies_volume_and_a_config_renamed_over(self):
        queue = self.queue_name("watch-pol")
        volume = ConfigMapVolume(os.path.join(self.make_dir(), "policies"))
        volume.update({"q.yaml": policy(queue, 5)})
        proxy = self.start_ops(config={"policies_dir": volume.path})
        self.assertEqual(self.reloads(proxy), (0, 0))

        volume.update({"q.yaml": policy(queue, 2)})
        self.wait_reloads(proxy, "ok", 1, within=2.0)
        time.sleep(SETTLE)  # observation window (see SETTLE), not a wait
        self.assertEqual(self.reloads(proxy), (1, 0), proxy.log_lines("reload"))
        self.assertIn(f"reload: {volume.path}/..data changed; reloading",
                      self.changed_lines(proxy)[0])

        proxy.config["shutdown"] = {"grace": "3s"}
        with open(proxy.config_path + ".tmp", "w") as f:
            f.write(proxy.config_text())
        os.replace(proxy.config_path + ".tmp", proxy.config_path)
        self.wait_reloads(proxy, "ok", 2, within=2.0)
        time.sleep(SETTLE)  # observation window (see SETTLE), not a wait
        self.assertEqual(self.reloads(proxy), (2, 0), proxy.log_lines("reload"))
        changed = self.changed_lines(proxy)
        self.assertEqual(len(changed), 2, f"reload lines: {proxy.log_lines('reload')}")
        self.assertIn(f"reload: {proxy.config_path} changed; reloading", changed[1])
        self.assert_proxy_alive(proxy)

    def make_dir(self):
        path = os.path.join(ops.harness.tmp_root(), f"watch-{uuid.uuid4().hex[:10]}")
        os.makedirs(path)
        self.addCleanup(shutil.rmtree, path, True)
        return path
