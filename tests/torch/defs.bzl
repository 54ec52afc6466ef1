"""torch_test: an allreduced.torch test against real daemons (//tests:defs.bzl), given the
client library that allreduced.torch loads with ctypes."""

load("//tests:defs.bzl", "daemon_py_test")

def torch_test(name, **kwargs):
    daemon_py_test(name, libraries = {"client_lib": "//client:libard_client.so"}, **kwargs)
