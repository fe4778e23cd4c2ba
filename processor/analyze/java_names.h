// java_names.h - Java names as Java source writes them, for the CLI's
// readers of jvm events (`strata analyze monitor`, `strata export`).
#ifndef STRATA_CLI_JAVA_NAMES_H
#define STRATA_CLI_JAVA_NAMES_H

#include <string>

namespace strata {

// A class name as the JVM gives it for an array (a type descriptor:
// "[I", "[[Ljava/lang/String;", "[Ljava.lang.Object;") in Java's own
// spelling ("int[]", "java.lang.String[][]", "java.lang.Object[]"); any
// other name unchanged.
inline std::string java_class_name(const std::string &n)
{
	size_t dims = 0;
	while (dims < n.size() && n[dims] == '[')
		dims++;
	if (dims == 0 || dims == n.size())
		return n;
	std::string base;
	const std::string rest = n.substr(dims);
	if (rest.size() == 1) {
		switch (rest[0]) {
		case 'Z':
			base = "boolean";
			break;
		case 'B':
			base = "byte";
			break;
		case 'C':
			base = "char";
			break;
		case 'S':
			base = "short";
			break;
		case 'I':
			base = "int";
			break;
		case 'J':
			base = "long";
			break;
		case 'F':
			base = "float";
			break;
		case 'D':
			base = "double";
			break;
		default:
			return n;
		}
	} else if (rest[0] == 'L' && rest.back() == ';') {
		base = rest.substr(1, rest.size() - 2);
		for (char &c : base)
			if (c == '/')
				c = '.';
	} else {
		return n;
	}
	for (size_t i = 0; i < dims; i++)
		base += "[]";
	return base;
}

} // namespace strata
#endif
