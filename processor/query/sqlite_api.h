/*
 * sqlite_api.h - SQLite's API as the query tables call it: linked directly
 * (`strata query`, libstrata-cli-read.so) or, compiled with
 * STRATA_SQLITE_EXTENSION, through the routines a loading SQLite hands a
 * loadable extension (libstrata-sqlite.so: sqlite3ext.h).
 */
#ifndef STRATA_QUERY_SQLITE_API_H
#define STRATA_QUERY_SQLITE_API_H

#ifdef STRATA_SQLITE_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else
#include <sqlite3.h>
#endif

#endif
