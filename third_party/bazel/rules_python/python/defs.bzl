"""Offline stand-in for @rules_python//python:defs.bzl.

Bazel 4 still ships the Python rules natively; the real rules_python of that era is a thin
wrapper too. Our BUILD files load from here so they also work on a later Bazel that needs
the real rules_python (swap the local_repository in WORKSPACE for an http_archive).
"""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

def py_library(**attrs):
    native.py_library(**attrs)

def py_binary(**attrs):
    native.py_binary(**attrs)

def py_test(**attrs):
    native.py_test(**attrs)

def py_runtime(**attrs):
    native.py_runtime(**attrs)

py_runtime_pair = _py_runtime_pair
