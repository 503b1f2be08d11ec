// The one source of gift_pch_pic and gift_pch_pie, the targets that build the
// project's precompiled header (cmake/third_party_pch.h,
// cmake/GiftPrecompiledHeaders.cmake); every other target reuses it.
