"""Shared compile options and test macros for allreduced (one place, like Ray's ray.bzl)."""

ARD_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

def ard_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = ARD_COPTS + copts, **kwargs)

def ard_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = ARD_COPTS + copts, **kwargs)

def ard_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    """A Catch2 unit test beside the code; the shared Catch2 main is linked in."""
    native.cc_test(
        name = name,
        copts = ARD_COPTS + copts,
        deps = deps + ["//third_party:catch2_main"],
        size = size,
        **kwargs
    )
