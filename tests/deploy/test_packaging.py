"""deploy/Dockerfile, the container's healthcheck and deploy/systemd/nackguard.service,
checked without Docker: the image builds with the commands developers and CI run
(deploy/install-deps.sh, then tests/run.sh's CMake configure and build), installs the
runtime libraries the built binary links and nothing else, runs unprivileged, and its
healthcheck works against a real nackguard."""

import configparser
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

from deploy_support import check_config, free_port, nackguard_bin, path, read

import waiting  # noqa: E402  (tests/integration, put on sys.path by deploy_support)

# Libraries every Debian image has: not installed by the Dockerfile.
BASE_IMAGE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1"}


def dockerfile_instructions(text):
    """[(stage index, INSTRUCTION, arguments)] with continuation lines joined."""
    out, stage, current = [], -1, ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if stripped.endswith("\\"):
            continue
        instruction, _, args = current.strip().partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stage += 1
        out.append((stage, instruction, args.strip()))
        current = ""
    return out


def shell_commands(run_args):
    """The simple commands of a RUN line (split on && and ;)."""
    return [shlex.split(c) for c in re.split(r"&&|;", run_args) if c.strip()]


def run_sh_cmake_commands():
    """The cmake commands tests/run.sh runs on a fresh build directory, with its variables
    replaced by their defaults and the repository root by "."."""
    text = read("tests", "run.sh")
    build_dir = re.search(r"build_dir=\$\{NACKGUARD_BUILD_DIR:-([^}]+)\}", text).group(1)
    jobs = re.search(r"jobs=\$\{NACKGUARD_JOBS:-([^}]+)\}", text).group(1)
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("cmake "):
            line = (line.replace('"$root"', ".").replace('"$build_dir"', build_dir)
                    .replace('"$jobs"', jobs).replace("$jobs", jobs))
            # The -D options that name the 4.x test nodes in the tests' CMake cache
            # (tests/run-brokers.sh): test settings, no part of what an image builds.
            commands.append([word for word in shlex.split(line)
                             if word != "${cmake_node_args[@]}"])
    # The main build only (the sanitizer and fuzzer builds go to other directories).
    configure = [c for c in commands if "-S" in c and "-DCMAKE_BUILD_TYPE=Release" in c
                 and c[c.index("-B") + 1] == build_dir]
    build = [c for c in commands if "--build" in c and c[c.index("--build") + 1] == build_dir]
    assert len(configure) == 1 and len(build) == 1, f"tests/run.sh's cmake lines: {commands}"
    return configure[0], build[0]


class Dockerfile(unittest.TestCase):
    def setUp(self):
        self.instructions = dockerfile_instructions(read("deploy", "Dockerfile"))
        self.stages = {}
        for stage, instruction, args in self.instructions:
            self.stages.setdefault(stage, []).append((instruction, args))

    def stage_runs(self, stage):
        return [cmd for instruction, args in self.stages[stage] if instruction == "RUN"
                for cmd in shell_commands(args)]

    def test_two_bookworm_stages(self):
        froms = [args for _, instruction, args in self.instructions if instruction == "FROM"]
        self.assertEqual(len(froms), 2)
        self.assertRegex(froms[0], r"^debian:(12|bookworm)\b.* AS build$")
        self.assertRegex(froms[1], r"^debian:(12|bookworm)(-slim)?\b")

    def test_ci_runs_tests_run_sh(self):
        self.assertIn("tests/run.sh", read(".ci", "run"))

    def test_build_stage_runs_install_deps_and_the_ci_cmake_commands(self):
        runs = self.stage_runs(0)
        self.assertIn(["deploy/install-deps.sh"], runs)
        copies = [args for instruction, args in self.stages[0] if instruction == "COPY"]
        self.assertIn("deploy/install-deps.sh deploy/install-deps.sh", copies)
        configure, build = run_sh_cmake_commands()
        docker_cmake = [c for c in runs if c and c[0] == "cmake"]
        docker_configure = [c for c in docker_cmake if "-S" in c]
        docker_build = [c for c in docker_cmake if "--build" in c]
        self.assertEqual(docker_configure, [configure])
        self.assertEqual(len(docker_build), 1)
        target = docker_build[0].index("--target")
        self.assertEqual(docker_build[0][target + 1], "nackguard")
        # The same as tests/run.sh, for the nackguard target only.
        self.assertEqual(docker_build[0][:target] + docker_build[0][target + 2:], build)

    def test_runtime_stage_installs_the_libraries_the_binary_links(self):
        installed = set()
        for cmd in self.stage_runs(1):
            if cmd[:2] == ["apt-get", "install"]:
                installed |= {a for a in cmd[2:] if not a.startswith("-")}
        self.assertTrue(installed)
        self.assertFalse({p for p in installed if p.endswith("-dev")},
                         "no -dev package at run time")
        binary = nackguard_bin()
        if not binary or not shutil.which("ldd") or not shutil.which("dpkg"):
            self.skipTest("no built binary, ldd or dpkg to compare with")
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        needed = set()
        for lib in re.findall(r"=>\s+(\S+)\s+\(", ldd):
            owner = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True,
                                   text=True)
            if owner.returncode != 0:
                owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
            self.assertEqual(owner.returncode, 0, f"no Debian package owns {lib}")
            needed.add(owner.stdout.split(":")[0])
        self.assertEqual(installed, needed - BASE_IMAGE_PACKAGES,
                         f"ldd {binary}:\n{ldd}")

    def test_runtime_libraries_come_from_the_dev_packages_install_deps_installs(self):
        if not shutil.which("dpkg-query"):
            self.skipTest("no dpkg-query")
        text = read("deploy", "install-deps.sh")
        array = re.search(r"packages=\((.*?)\n\)", text, re.S).group(1)
        build_packages = {word for line in array.splitlines()
                          for word in line.split("#")[0].split()}
        # What the -dev packages pull in, -dev packages followed three levels deep.
        reached, expanded = set(), set()
        frontier = {p for p in build_packages if p.endswith("-dev")}
        for _ in range(3):
            following = set()
            for package in frontier - expanded:
                expanded.add(package)
                out = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", package],
                                     capture_output=True, text=True)
                for alternative in out.stdout.split(","):
                    name = alternative.split("|")[0].split("(")[0].split(":")[0].strip()
                    if name:
                        following.add(name)
            reached |= following
            frontier = {p for p in following if p.endswith("-dev")}
        runtime = set()
        for cmd in self.stage_runs(1):
            if cmd[:2] == ["apt-get", "install"]:
                runtime |= {a for a in cmd[2:] if not a.startswith("-")}
        self.assertLessEqual(runtime, reached, "runtime packages that no -dev package of "
                             "deploy/install-deps.sh depends on (is it installed?)")

    def test_runtime_stage_files_user_ports_and_healthcheck(self):
        runtime = self.stages[1]
        for instruction, args in runtime:
            if instruction == "COPY" and not args.startswith("--from"):
                for source in shlex.split(args)[:-1]:
                    self.assertTrue(os.path.exists(path(source)), f"COPY {source}: missing")
        user = [args for instruction, args in runtime if instruction == "USER"]
        self.assertEqual(len(user), 1)
        self.assertNotIn(user[0].split(":")[0], ("0", "root"))
        exposed = {p for instruction, args in runtime if instruction == "EXPOSE"
                   for p in args.split()}
        self.assertEqual(exposed, {"5673", "9464"})
        health = [args for instruction, args in runtime if instruction == "HEALTHCHECK"]
        self.assertEqual(len(health), 1)
        self.assertIn("nackguard-healthcheck", health[0])
        self.assertIn("/healthz", health[0])
        command = " ".join(args for instruction, args in runtime
                           if instruction in ("ENTRYPOINT", "CMD"))
        self.assertIn("/etc/nackguard/nackguard.yaml", command)

    def test_dockerignore_keeps_build_directories_out(self):
        ignored = read("deploy", "Dockerfile.dockerignore").split()
        for entry in (".git", "build", "build-*"):
            self.assertIn(entry, ignored)


@unittest.skipUnless(nackguard_bin(), "NACKGUARD_BIN is not built")
class Healthcheck(unittest.TestCase):
    """deploy/docker/healthcheck.sh (the image's HEALTHCHECK) against a real nackguard."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="nackguard-healthcheck-")
        os.makedirs(os.path.join(cls.dir, "policies"))
        cls.metrics_port = free_port()
        config = os.path.join(cls.dir, "nackguard.yaml")
        with open(config, "w") as f:
            # Upstream: a closed port, so that /readyz says "not ready".
            f.write(f"listen: {{address: 127.0.0.1, port: {free_port()}}}\n"
                    "upstream: {host: 127.0.0.1, port: 1, connect_timeout: 500ms}\n"
                    f"policies_dir: {cls.dir}/policies\nthreads: 1\n"
                    f"metrics: {{address: 127.0.0.1, port: {cls.metrics_port}}}\n")
        cls.log = open(os.path.join(cls.dir, "nackguard.log"), "wb")
        cls.proxy = subprocess.Popen([nackguard_bin(), "--config", config], stdout=cls.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        waiting.wait_for(lambda: cls.check("/healthz", cls.metrics_port)[0] == 0, 10, 0.1)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.terminate()
        try:
            cls.proxy.wait(10)
        except subprocess.TimeoutExpired:
            cls.proxy.kill()
            cls.proxy.wait()
        cls.log.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @staticmethod
    def check(http_path, port):
        env = dict(os.environ, NACKGUARD_METRICS_PORT=str(port))
        out = subprocess.run(["bash", path("deploy", "docker", "healthcheck.sh"), http_path],
                             env=env, capture_output=True, text=True, timeout=15)
        return out.returncode, out.stderr

    def test_healthy(self):
        self.assertEqual(self.check("/healthz", self.metrics_port), (0, ""))

    def test_not_ready_without_a_broker(self):
        code, message = self.check("/readyz", self.metrics_port)
        self.assertEqual(code, 1)
        self.assertIn("503", message)

    def test_other_answers_and_nothing_listening_fail(self):
        self.assertEqual(self.check("/no-such-path", self.metrics_port)[0], 1)
        self.assertEqual(self.check("/healthz", free_port())[0], 1)


class SystemdUnit(unittest.TestCase):
    def setUp(self):
        self.unit = configparser.ConfigParser(strict=False, interpolation=None)
        self.unit.optionxform = str
        self.unit.read(path("deploy", "systemd", "nackguard.service"))

    def test_commands(self):
        service = self.unit["Service"]
        start = shlex.split(service["ExecStart"])
        self.assertEqual(start[0], "/usr/local/bin/nackguard")
        self.assertEqual(start[1:], ["--config", "/etc/nackguard/nackguard.yaml"])
        self.assertEqual(shlex.split(service["ExecStartPre"]), start + ["--check-config"])
        self.assertIn("-HUP", service["ExecReload"])
        self.assertEqual(service["KillSignal"], "SIGTERM")
        self.assertEqual(self.unit["Install"]["WantedBy"], "multi-user.target")
        binary = nackguard_bin()
        if binary:
            usage = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
            for flag in ("--config", "--check-config"):
                self.assertIn(flag, usage)

    def test_runs_unprivileged(self):
        service = self.unit["Service"]
        self.assertTrue(service.get("DynamicUser") == "yes" or service.get("User"))
        self.assertEqual(service["NoNewPrivileges"], "yes")

    @unittest.skipUnless(shutil.which("systemd-analyze") and nackguard_bin(),
                         "systemd-analyze or NACKGUARD_BIN missing")
    def test_systemd_analyze_verify(self):
        with tempfile.TemporaryDirectory() as tmp:
            unit = os.path.join(tmp, "nackguard.service")
            with open(unit, "w") as f:  # the installed path replaced by the built binary
                f.write(read("deploy", "systemd", "nackguard.service")
                        .replace("/usr/local/bin/nackguard", nackguard_bin()))
            out = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True,
                                 text=True, timeout=60)
            problems = [line for line in (out.stdout + out.stderr).splitlines()
                        if "nackguard.service" in line and "sysinit.target" not in line]
            self.assertEqual(problems, [])


class OperatorDocs(unittest.TestCase):
    DOCS = ("deployment.md", "operations.md", "choosing-a-policy.md", "compatibility.md")

    def test_relative_links_resolve(self):
        for name in self.DOCS:
            text = read("docs", name)
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
                if "://" in target:
                    continue
                with self.subTest(doc=name, link=target):
                    self.assertTrue(os.path.exists(os.path.join(path("docs"), target)), target)

    def test_operations_has_alerts_and_replay(self):
        text = read("docs", "operations.md")
        self.assertRegex(text, r"(?m)^## Alerts$")
        self.assertRegex(text, r"(?m)^## Replay$")
        self.assertIn("(replay.md)", text)

    @unittest.skipUnless(nackguard_bin(), "NACKGUARD_BIN is not built")
    def test_policy_snippets_in_choosing_a_policy_are_valid(self):
        snippets = re.findall(r"```yaml\n(.*?)```", read("docs", "choosing-a-policy.md"), re.S)
        self.assertGreaterEqual(len(snippets), 3)
        policies = {f"snippet{i}.yaml": text for i, text in enumerate(snippets)}
        code, output = check_config("policies_dir: placeholder\n", policies)
        self.assertEqual(code, 0, output)

    def test_deployment_covers_each_way(self):
        text = read("docs", "deployment.md")
        for needle in ("deploy/kubernetes/", "deploy/docker-compose.yaml",
                       "deploy/systemd/nackguard.service", "deploy/Dockerfile"):
            self.assertIn(needle, text)


if __name__ == "__main__":
    unittest.main()
