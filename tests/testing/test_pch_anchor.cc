// The one source of gift_test_pch, the target that builds the tests'
// precompiled header (tests/testing/test_pch.h, tests/CMakeLists.txt); the
// test binaries reuse that header. Its main is GoogleTest's; it runs nothing.
