"""Configuration: precedence, files, OTEL_* defaults, and errors that name the setting."""

from __future__ import annotations

import json
import logging
import sys

import pytest

import chronicle
from chronicle import config
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


def test_a_stray_environment_variable_is_one_warning_and_recording_stays_on(caplog):
    config._warned.clear()  # once per process: start this test's process-wide count afresh
    environ = {"CHRONICLE_STORE": "sqlite", "CHRONICLE_BACH_SIZE": "3", "CHRONICLE_BATCH_SIZE": "7"}
    environ["CHRONICLE_MYPYC"] = "1"  # the compiled build's switch, set after a build: no warning
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        settings = load_settings(environ=environ)
        load_settings(environ=environ)  # said once per variable, not at every configure
    assert settings.enabled and settings.batch_size == 7
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    (store,) = [line for line in said if "CHRONICLE_STORE" in line]
    assert "is not a Chronicle setting and is ignored" in store
    (typo,) = [line for line in said if "CHRONICLE_BACH_SIZE" in line]
    assert "did you mean CHRONICLE_BATCH_SIZE?" in typo


def test_the_service_version_comes_from_the_resource_or_the_0x_build_id(caplog):
    assert load_settings(environ={}).service_version is None
    from_otel = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=billing,service.version=1.4.2"}
    assert load_settings(environ=from_otel).service_version == "1.4.2"
    mine = {**from_otel, "CHRONICLE_SERVICE_VERSION": "1.5.0"}
    assert load_settings(environ=mine).service_version == "1.5.0"
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        assert load_settings(environ={"CHRONICLE_BUILD_ID": "b-981"}).service_version == "b-981"
    assert "CHRONICLE_BUILD_ID is read as CHRONICLE_SERVICE_VERSION" in caplog.text


def test_the_service_version_is_on_every_span_and_in_chronicle_traces(control_plane, caplog):
    chronicle.configure(
        control_plane_url=control_plane.url, service_name="billing", service_version="1.4.2"
    )
    try:
        with chronicle.record("refund", labels={"session_id": "version-check"}) as session:
            pass
        assert chronicle.flush(10)
        trace = control_plane.trace(session.trace_id)
        assert trace is not None
        (span,) = trace["spans"]
        assert span["metadata"]["chronicle.service_version"] == "1.4.2"
        (found,) = chronicle.find_traces(session_id="version-check")
        assert found.services == ("billing@1.4.2",)
    finally:
        chronicle.reset()


def test_a_provider_naming_the_service_otherwise_is_warned_about_once(caplog):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    theirs = TracerProvider(resource=Resource.create({"service.name": "unknown_service:python"}))
    with caplog.at_level(logging.WARNING, logger="chronicle"):
        chronicle.configure(tracer_provider=theirs, service_name="support-agent")
        chronicle.configure(tracer_provider=theirs, service_name="support-agent")
    chronicle.reset()
    said = [r.getMessage() for r in caplog.records if "two names" in r.getMessage()]
    assert len(said) == 1
    assert "'unknown_service:python'" in said[0] and "OTEL_SERVICE_NAME=support-agent" in said[0]
