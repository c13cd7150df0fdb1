//go:build !ucx

package main

// buildTags: this velo was built without the ucx tag.
const buildTags = ""
