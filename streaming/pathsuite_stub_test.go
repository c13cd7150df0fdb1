package streaming

var controlClauses, lossClauses, mpscClauses []suiteClause
