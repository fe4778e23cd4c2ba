/*
 * temp_dir.h - a test's private directory, /tmp/strata-TAG-XXXXXX, removed
 * with everything in it when the object goes.
 */
#ifndef STRATA_TESTS_UNIT_TEMP_DIR_H
#define STRATA_TESTS_UNIT_TEMP_DIR_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace strata_test {

class TempDir {
public:
	explicit TempDir(const char *tag)
	{
		std::string t = std::string("/tmp/strata-") + tag + "-XXXXXX";
		if (mkdtemp(&t[0]))
			path_ = t;
	}
	~TempDir()
	{
		if (path_.empty())
			return;
		const std::string cmd = "rm -rf '" + path_ + "'";
		if (system(cmd.c_str()) != 0)
			ADD_FAILURE() << "cannot remove " << path_;
	}
	TempDir(const TempDir &) = delete;
	TempDir &operator=(const TempDir &) = delete;
	bool ok() const { return !path_.empty(); }
	const std::string &path() const { return path_; }

private:
	std::string path_;
};

} // namespace strata_test
#endif
