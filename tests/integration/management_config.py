"""The `upstream.management` section a test proxy's config gets (test_management_limits.py,
counting_support.py): the proxy's plain one-line upstream, as harness.Proxy writes it,
replaced by one with the management API's URL, user, password file and refresh."""

import os


def with_management(proxy, text, url, username, password, refresh="1s", ca_file=None):
    """`text`, a config harness.Proxy wrote for `proxy`, with a management section; the
    password goes to a file in the proxy's directory."""
    password_file = os.path.join(proxy.dir, "management-password")
    with open(password_file, "w") as f:
        f.write(password + "\n")
    plain = f"upstream: {{host: {proxy.upstream_host}, port: {proxy.upstream_port}}}\n"
    assert plain in text, text
    return text.replace(plain, (
        f"upstream:\n  host: {proxy.upstream_host}\n  port: {proxy.upstream_port}\n"
        f"  management:\n    url: {url}\n    username: {username}\n"
        f"    password_file: {password_file}\n    refresh: {refresh}\n"
        "    timeout: 2s\n" + (f"    ca_file: {ca_file}\n" if ca_file else "")))
