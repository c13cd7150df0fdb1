package streaming

var lossClauses, mpscClauses []suiteClause
