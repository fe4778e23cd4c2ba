// sample.cpp - the same provider definition and call sites as sample.c,
// compiled as C++17.
#include "sample.c"
