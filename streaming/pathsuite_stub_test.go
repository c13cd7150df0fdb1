package streaming

var mpscClauses []suiteClause
