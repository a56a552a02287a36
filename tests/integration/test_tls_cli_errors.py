"""Bad TLS configuration through the real ``groupcoord`` command: a missing or unreadable
file, a key that does not match its certificate, a CA file that is no CA bundle -> one line
on stderr and exit 1; options that do not go together -> exit 2. Nothing starts. (Each case
is a process start: slow on a loaded machine, hence few cases and the slow mark.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.test_cli_errors import assert_one_line_error, groupcoord
from tests.support.certs import Ca

pytestmark = pytest.mark.slow


@dataclass
class Files:
    ca: str
    cert: str
    key: str
    other_key: str
    missing: str
    directory: str
    garbage: str


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    d = tmp_path_factory.mktemp("tls-files")
    ca = Ca()
    good, other = ca.issue(d, "good"), ca.issue(d, "other")
    (d / "garbage.pem").write_text("not PEM at all\n")
    (d / "a-directory").mkdir()
    return Files(
        str(ca.write(d)),
        str(good.cert),
        str(good.key),
        str(other.key),
        str(d / "missing.crt"),
        str(d / "a-directory"),
        str(d / "garbage.pem"),
    )


def server_tls(cert: str, key: str, ca: str | None = None) -> list[str]:
    out = ["--tls-certfile", cert, "--tls-keyfile", key]
    return out + (["--tls-cafile", ca] if ca else [])


ASSIGNOR = ["assignor", "--grpc-port", "0"]
DEV = ["dev", "--grpc-port", "0", "--kafka-port", "0"]
GATEWAY = ["gateway", "--kafka-port", "0"]


@pytest.mark.parametrize(
    ("command", "case", "fragments"),
    [
        (ASSIGNOR, "missing-cert", ["cannot read the TLS certificate", "No such file"]),
        (ASSIGNOR, "key-mismatch", ["does not match the certificate"]),
        (DEV, "unreadable-key", ["cannot read the TLS private key", "Is a directory"]),
        (DEV, "garbage-ca", ["cannot use the TLS CA bundle"]),
        (GATEWAY, "key-mismatch", ["does not match the certificate"]),
    ],
)
def test_bad_grpc_tls_files_fail_in_one_line(
    tmp_path: Path, files: Files, command: list[str], case: str, fragments: list[str]
) -> None:
    tls = {
        "missing-cert": server_tls(files.missing, files.key),
        "key-mismatch": server_tls(files.cert, files.other_key),
        "unreadable-key": server_tls(files.cert, files.directory),
        "garbage-ca": server_tls(files.cert, files.key, files.garbage),
    }[case]
    extra = ["--data-dir", str(tmp_path / "data")] if command[0] == "dev" else []
    result = groupcoord(*command, *extra, *tls, timeout=30)
    assert result.returncode == 1, result.stderr
    assert_one_line_error(result, *fragments)


def test_bad_listener_files_fail_in_one_line(files: Files) -> None:
    result = groupcoord(
        "gateway", "--kafka-port", "0", "--security-protocol", "SSL",
        "--ssl-certfile", files.cert, "--ssl-keyfile", files.other_key, timeout=30,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert_one_line_error(result, "does not match the certificate")


def test_a_client_with_a_missing_ca_file_fails_in_one_line(files: Files) -> None:
    result = groupcoord("groups", "list", "--tls-cafile", files.missing, timeout=30)
    assert result.returncode == 1, result.stderr
    assert_one_line_error(result, "cannot read the TLS CA bundle", "missing.crt")


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["gateway", "--security-protocol", "SSL"], 2, "needs --ssl-certfile and --ssl-keyfile"),
        (["gateway", "--security-protocol", "SASL_SSL"], 2, "SASL_SSL needs --store"),
        (["gateway", "--security-protocol", "SASL_SSL", "--store", "sqlite:///{key}.db"],
         2, "needs --ssl-certfile and --ssl-keyfile"),
        (["gateway", "--security-protocol", "SSL", "--ssl-certfile", "{cert}",
          "--ssl-keyfile", "{key}", "--ssl-client-auth", "required"], 2, "needs --ssl-cafile"),
        (["assignor", "--tls-certfile", "{cert}"], 2, "both --tls-certfile and --tls-keyfile"),
    ],
)  # fmt: skip
def test_tls_options_that_do_not_go_together(
    files: Files, args: list[str], code: int, fragment: str
) -> None:
    args = [a.format(cert=files.cert, key=files.key) for a in args]
    result = groupcoord(*args, "--kafka-port" if args[0] == "gateway" else "--grpc-port", "0")
    assert result.returncode == code, result.stderr
    assert_one_line_error(result, fragment)
