#!/bin/sh
echo "bazel coverage is not supported offline (third_party/bazel/remote_coverage_tools is a stand-in)" >&2
exit 1
