// The client library's named numbers (ARD_SUM, ARD_FLOAT32, ARD_ALLREDUCE, ARD_ABORTED, ... of
// client/allreduced_client.h), exported by the op library for the Python package, which reads
// them through ctypes (allreduced/tensorflow/ops_library.py) instead of keeping its own copy: the
// client library's ard_constants (linked in statically, its symbols hidden here). Immutable; any
// thread.
#pragma once

extern "C" {
// Points *names and *values at parallel arrays of static storage ("ARD_SUM" and its value, ...)
// and returns their length.
__attribute__((visibility("default"))) int allreduced_tf_constants(const char* const** names,
                                                                   const int** values);
}
