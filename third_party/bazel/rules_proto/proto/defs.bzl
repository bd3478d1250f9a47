"""Offline stand-in for @rules_proto//proto:defs.bzl (forwards to the native rules)."""

def proto_library(**attrs):
    native.proto_library(**attrs)

def proto_lang_toolchain(**attrs):
    native.proto_lang_toolchain(**attrs)
