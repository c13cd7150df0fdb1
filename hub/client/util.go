package client

import "errors"

func asHub(err error, e **HubError) bool { return errors.As(err, e) }

func isNoAnswer(err error) bool {
	var na *NoAnswerError
	return errors.As(err, &na)
}
