/*
 * names.cpp - see names.h.
 */
#include "names.h"

#include <cctype>
#include <ctime>

namespace strata {

std::string local_timestamp()
{
	time_t t = time(nullptr);
	struct tm tm;
	localtime_r(&t, &tm);
	char buf[32];
	strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
	return buf;
}

std::string file_safe(const std::string &s)
{
	std::string o;
	for (char c : s)
		o += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
	if (o.empty() || o[0] == '.')
		o = "_" + o;
	return o;
}

} // namespace strata
