"""Replay: run one recorded request again in test code, with stubs and cut-points."""
