"""Keys from Python: Runtime(identity=, known_hosts=, strict_host_keys=)
against a real ferryd started with --authorized-keys and --host-key."""

import numpy as np
import pytest

import ferry
import ferry.testing

LINK_VARIABLES = ("FERRY_TOKEN", "FERRY_TOKEN_FILE", "FERRY_IDENTITY", "FERRY_KNOWN_HOSTS",
                  "FERRY_STRICT_HOST_KEYS", "FERRY_PLAINTEXT", "FERRY_ENCRYPT_LOOPBACK")


@pytest.fixture(autouse=True)
def _no_link_variables(monkeypatch, tmp_path):
    for name in LINK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # A key sign-in pins in ~/.config/ferry/known_hosts by default: never the user's.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def keyed(tmp_path):
    key = ferry.testing.keygen(tmp_path / "id_ferry", name="pytest")
    with ferry.testing.local_server(authorized_keys=[key.public_line], host_key=tmp_path / "host_key") as server:
        yield key, server


def run_a_task(rt, address):
    x = rt.array(np.arange(100, dtype=np.float64))
    y = rt.zeros(100, np.float64)
    f = rt.axpy(x, y, 2.0, on="remote")
    f.result()
    assert f.device == "remote:" + address
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(100))


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path):
    key = ferry.testing.keygen(tmp_path / "id", name="someone")
    assert key.public_line.startswith("ferry-ed25519 ") and key.public_line.endswith(" someone")
    assert (key.path.stat().st_mode & 0o777) == 0o600


def test_an_identity_signs_in_and_runs_a_task(keyed, tmp_path):
    key, server = keyed
    with ferry.Runtime(remotes=[server.address], identity=key.path, known_hosts=tmp_path / "known_hosts",
                       workers=1) as rt:
        assert rt.remote_stats(server.address)["connected"]
        run_a_task(rt, server.address)
    assert "pytest" in server.log()  # ferryd names the key
    # Pinned on first use (not strict): the file now holds ferryd's line.
    assert (tmp_path / "known_hosts").read_text().split()[:3] == server.host_key_line.split()[:3]


def test_without_an_identity_or_with_an_unlisted_key_it_is_refused(keyed, tmp_path):
    _, server = keyed
    # No key and no token: nothing to sign in with, said before any dial.
    with pytest.raises(ferry.UsageError, match="need a key or a token"):
        ferry.Runtime(remotes=[server.address], known_hosts=tmp_path / "known_hosts", workers=1)
    stranger = ferry.testing.keygen(tmp_path / "stranger")
    with pytest.raises(ferry.RemoteError, match=server.address) as refused:
        ferry.Runtime(remotes=[server.address], identity=stranger.path, known_hosts=tmp_path / "known_hosts",
                      workers=1, remote_timeout=5)
    # A security refusal does not suggest running without the host.
    assert "FERRY_REMOTE_POLICY" not in str(refused.value)


def test_strict_host_keys_refuse_an_unpinned_ferryd_and_accept_it_once_pinned(keyed, tmp_path):
    key, server = keyed
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    with pytest.raises(ferry.RemoteError, match=server.address) as refused:
        ferry.Runtime(remotes=[server.address], identity=key.path, known_hosts=known_hosts,
                      strict_host_keys=True, workers=1, remote_timeout=5)
    assert "does not pin" in str(refused.value)
    assert "FERRY_REMOTE_POLICY" not in str(refused.value)
    assert known_hosts.read_text() == "", "strict checking pinned the server anyway"

    known_hosts.write_text(server.host_key_line + "\n")  # ferryd --host-key FILE wrote FILE.pub
    with ferry.Runtime(remotes=[server.address], identity=key.path, known_hosts=known_hosts,
                       strict_host_keys=True, workers=1) as rt:
        run_a_task(rt, server.address)


def test_the_environment_overrides_the_arguments_unless_read_environment_is_false(keyed, tmp_path, monkeypatch):
    key, server = keyed
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    monkeypatch.setenv("FERRY_STRICT_HOST_KEYS", "1")
    with pytest.raises(ferry.RemoteError, match="does not pin"):
        ferry.Runtime(remotes=[server.address], identity=key.path, known_hosts=known_hosts,
                      strict_host_keys=False, workers=1, remote_timeout=5)
    with ferry.Runtime(remotes=[server.address], identity=key.path, known_hosts=known_hosts,
                       strict_host_keys=False, read_environment=False, workers=1, gpus="none",
                       persist_perf_models=False) as rt:
        assert rt.remote_stats(server.address)["connected"]
