/* The probe sample compiled as C++17. */
#include "probe_sample.c"
