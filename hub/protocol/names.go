package protocol

// MaxServiceNameLen is the longest service name.
const MaxServiceNameLen = 128

// MaxExtensionNameLen is the longest extension name. The book sets no
// bound; 64 keeps a name one short URL segment.
const MaxExtensionNameLen = 64

// ServicesExtension is the name of the built-in services extension. No
// other extension may take it.
const ServicesExtension = "services"

// ValidateServiceName checks that name is 1 to 128 of A-Z a-z 0-9 . _ -
// and not "." or "..", so it is always one path segment that no URL
// resolver turns into another route. The error is a CodeBadRequest Error.
func ValidateServiceName(name string) error {
	if len(name) == 0 || len(name) > MaxServiceNameLen {
		return badRequestf("service name must be 1 to %d characters", MaxServiceNameLen)
	}
	if name == "." || name == ".." {
		return badRequestf("service name %q is a path step", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(isLower(c) || isDigit(c) || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-') {
			return badRequestf("service name %q has a character outside A-Z a-z 0-9 . _ -", name)
		}
	}
	return nil
}

// ValidateExtensionName checks that name is one URL segment of a-z 0-9 _ -
// (1 to 64 characters), so an extension's routes under /v1/ext/{name}/
// cannot reach a core path. The error is a CodeBadRequest Error.
func ValidateExtensionName(name string) error {
	if len(name) == 0 || len(name) > MaxExtensionNameLen {
		return badRequestf("extension name must be 1 to %d characters", MaxExtensionNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(isLower(c) || isDigit(c) || c == '_' || c == '-') {
			return badRequestf("extension name %q has a character outside a-z 0-9 _ -", name)
		}
	}
	return nil
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
