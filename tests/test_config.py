"""Configuration: precedence, files, OTEL_* defaults, and errors that name the setting."""

from __future__ import annotations

import json
import sys

import pytest

import chronicle
from chronicle.config import load_settings


def test_defaults():
    settings = load_settings(environ={})
    assert settings.enabled is True
    assert settings.control_plane_url is None
    assert settings.service_name == "unknown_service"
    assert settings.trace_registration == "sync"
    assert settings.inject_hosts == ()
    assert settings.fail_open is True
    assert settings.default_redactors is True


def test_code_beats_environment_beats_file_beats_otel(tmp_path):
    config = tmp_path / "chronicle.json"
    config.write_text(json.dumps({"service_name": "from-file", "batch_size": 7, "timeout": 3}))
    environ = {
        "CHRONICLE_CONFIG": str(config),
        "CHRONICLE_SERVICE_NAME": "from-env",
        "OTEL_SERVICE_NAME": "from-otel",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9",
        "OTEL_BSP_SCHEDULE_DELAY": "250",
        "OTEL_BSP_MAX_QUEUE_SIZE": "1234",
    }
    settings = load_settings({"service_name": "from-code"}, environ=environ)
    assert settings.service_name == "from-code"
    settings = load_settings({}, environ=environ)
    assert settings.service_name == "from-env"
    assert settings.batch_size == 7  # the file beats OTEL_BSP_*
    assert settings.timeout == 3.0
    assert settings.flush_interval == 0.25  # OTEL_BSP_SCHEDULE_DELAY is in milliseconds
    assert settings.max_queue == 1234
    del environ["CHRONICLE_SERVICE_NAME"]
    assert load_settings({}, environ=environ).service_name == "from-file"
    del environ["CHRONICLE_CONFIG"]
    assert load_settings({}, environ=environ).service_name == "from-otel"


def test_environment_values_are_parsed():
    settings = load_settings(
        environ={
            "CHRONICLE_ENABLED": "off",
            "CHRONICLE_INJECT_HOSTS": "billing.internal, *.agents.local:8443",
            "CHRONICLE_ON_OVERFLOW": "BLOCK",
            "CHRONICLE_MAX_PAYLOAD_BYTES": "2048",
            "CHRONICLE_CONTROL_PLANE_URL": "http://cp:8800/",
        }
    )
    assert settings.enabled is False
    assert settings.inject_hosts == ("billing.internal", "*.agents.local:8443")
    assert settings.on_overflow == "block"
    assert settings.max_payload_bytes == 2048
    assert settings.control_plane_url == "http://cp:8800"


def test_otel_sdk_disabled_turns_recording_off():
    assert load_settings(environ={"OTEL_SDK_DISABLED": "true"}).enabled is False
    assert load_settings(environ={"OTEL_SDK_DISABLED": "true", "CHRONICLE_ENABLED": "1"}).enabled


def test_service_name_from_resource_attributes():
    environ = {"OTEL_RESOURCE_ATTRIBUTES": "team=ai,service.name=router"}
    assert load_settings(environ=environ).service_name == "router"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML needs tomllib (3.11+)")
def test_a_toml_file_with_a_chronicle_table(tmp_path):
    config = tmp_path / "pyproject.toml"
    config.write_text('[chronicle]\nservice_name = "toml-agent"\nemit_open = true\n')
    settings = load_settings(environ={"CHRONICLE_CONFIG": str(config)})
    assert (settings.service_name, settings.emit_open) == ("toml-agent", True)


@pytest.mark.parametrize(
    ("overrides", "environ", "named"),
    [
        ({"batchsize": 3}, {}, "batchsize"),
        ({"batch_size": 0}, {}, "batch_size"),
        ({"on_overflow": "spill"}, {}, "on_overflow"),
        ({"control_plane_url": "cp:8800"}, {}, "control_plane_url"),
        ({"timeout": -1}, {}, "timeout"),
        ({"enabled": "maybe"}, {}, "enabled"),
        ({"tracer_provider": object()}, {}, "tracer_provider"),
        ({}, {"CHRONICLE_FLUSH_INTERVAL": "soon"}, "CHRONICLE_FLUSH_INTERVAL"),
        ({}, {"CHRONICLE_COLOUR": "blue"}, "CHRONICLE_COLOUR"),
        ({}, {"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
    ],
)
def test_bad_settings_raise_an_error_naming_them(overrides, environ, named):
    with pytest.raises(chronicle.ConfigurationError) as caught:
        load_settings(overrides, environ=environ)
    assert caught.value.setting == named
    assert str(caught.value).startswith(named)


def test_bad_file_contents_name_the_file_and_key(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"sevice_name": "typo"}))
    with pytest.raises(chronicle.ConfigurationError, match="sevice_name"):
        load_settings(environ={"CHRONICLE_CONFIG": str(config)})
    config.write_text("{not json")
    with pytest.raises(chronicle.ConfigurationError, match="not valid JSON"):
        load_settings(environ={"CHRONICLE_CONFIG": str(config)})
    with pytest.raises(chronicle.ConfigurationError, match="cannot read"):
        load_settings(environ={"CHRONICLE_CONFIG": str(tmp_path / "missing.json")})


def test_configure_rejects_a_bad_setting_and_keeps_the_old_configuration(control_plane):
    chronicle.configure(control_plane_url=control_plane.url)
    with pytest.raises(chronicle.ConfigurationError, match="max_queue"):
        chronicle.configure(max_queue="big")
    assert chronicle.is_enabled()
    from chronicle import runtime

    assert runtime.current().settings.control_plane_url == control_plane.url


def test_the_api_key_is_not_in_the_settings_repr():
    settings = load_settings({"api_key": "super-secret-key"}, environ={})
    assert "super-secret-key" not in repr(settings)
