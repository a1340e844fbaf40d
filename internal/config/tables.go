package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// DefaultStack is the stack whose table names are the defaults: samconfig.toml's
// stack name, the devstack's tables.
const DefaultStack = "once"

// tableName is DynamoDB's rule for table names.
var tableName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

// Table returns the name of the DynamoDB table whose logical ID in
// template.yaml is logicalID (RefundsTable): the value of its variable
// (TableEnv: ONCE_REFUNDS_TABLE), or, when that is unset or empty, its name in
// the stack DefaultStack (TableDefault: once-refunds). One rule for every
// table, so that a new table needs no configuration code: template.yaml sets
// the variable of each table a function uses (internal/deploytest holds it to
// the rule and to the code's calls of Table). The name is not checked here;
// see CheckTables.
func (c Config) Table(logicalID string) string {
	if c.getenv != nil {
		if v := strings.TrimSpace(c.getenv(TableEnv(logicalID))); v != "" {
			return v
		}
	}
	return TableDefault(logicalID)
}

// CheckTables reports, joined, every table among logicalIDs whose name as
// getenv gives it (see Config.Table) is not a DynamoDB table name. Lambda's
// functions get their names from the template, which cannot give a bad one;
// the devstack checks every table of the template with the rest of its
// environment, and oncectl its table.
func CheckTables(getenv func(string) string, logicalIDs ...string) error {
	c := Config{getenv: getenv}
	var errs []error
	for _, id := range logicalIDs {
		if v := c.Table(id); !tableName.MatchString(v) {
			errs = append(errs, fmt.Errorf("config: %s=%q: not a DynamoDB table name (3-255 characters of a-z A-Z 0-9 _ . -)", TableEnv(id), v))
		}
	}
	return errors.Join(errs...)
}

// TableEnv returns the variable that names the table logicalID: ONCE_, the
// words of the ID before its Table suffix in upper case joined by
// underscores, and _TABLE (ApiKeysTable: ONCE_API_KEYS_TABLE).
func TableEnv(logicalID string) string {
	return "ONCE_" + strings.ToUpper(strings.Join(tableWords(logicalID), "_")) + "_TABLE"
}

// TableDefault returns the name of the table logicalID in the stack
// DefaultStack, as template.yaml names its tables
// (${AWS::StackName}-<words in lower case joined by dashes>): ApiKeysTable is
// once-api-keys.
func TableDefault(logicalID string) string {
	return DefaultStack + "-" + strings.ToLower(strings.Join(tableWords(logicalID), "-"))
}

// tableWords splits a logical ID less its Table suffix into its words: a
// word starts at an upper-case letter that follows a lower-case letter or a
// digit, or that starts a capitalised word after an acronym (APIKeys: API,
// Keys).
func tableWords(logicalID string) []string {
	name := []rune(strings.TrimSuffix(logicalID, "Table"))
	var words []string
	start := 0
	for i := 1; i < len(name); i++ {
		prev, cur := name[i-1], name[i]
		next := rune(0)
		if i+1 < len(name) {
			next = name[i+1]
		}
		if unicode.IsUpper(cur) && (unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && unicode.IsLower(next)) {
			words = append(words, string(name[start:i]))
			start = i
		}
	}
	if start < len(name) {
		words = append(words, string(name[start:]))
	}
	return words
}
