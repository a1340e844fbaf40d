package samtemplate

import (
	"fmt"
	"os"
	"strings"

	"github.com/BurntSushi/toml"
)

// SAMConfig is a parsed samconfig.toml: for each environment ("default",
// "localstack", ...) and command ("global", "build", "deploy", ...), the
// command's parameters.
type SAMConfig struct {
	// Version is the file's version (0.1).
	Version float64
	// Envs holds env -> command -> parameter -> value.
	Envs map[string]map[string]map[string]any
}

// LoadSAMConfig parses the samconfig.toml file at path.
func LoadSAMConfig(path string) (*SAMConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %w", err)
	}
	c, err := ParseSAMConfig(data)
	if err != nil {
		return nil, fmt.Errorf("samtemplate: %s: %w", path, err)
	}
	return c, nil
}

// ParseSAMConfig parses a samconfig.toml document. Every table other than
// version must have the shape [env.command.parameters].
func ParseSAMConfig(data []byte) (*SAMConfig, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("parse TOML: %w", err)
	}
	c := &SAMConfig{Envs: map[string]map[string]map[string]any{}}
	for env, v := range raw {
		if env == "version" {
			f, ok := v.(float64)
			if !ok {
				return nil, fmt.Errorf("version = %v, want a number such as 0.1", v)
			}
			c.Version = f
			continue
		}
		cmds, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not a table", env)
		}
		c.Envs[env] = map[string]map[string]any{}
		for cmd, cv := range cmds {
			ct, _ := cv.(map[string]any)
			params, ok := ct["parameters"].(map[string]any)
			if !ok || len(ct) != 1 {
				return nil, fmt.Errorf("[%s.%s] must hold exactly one table, [%s.%s.parameters]", env, cmd, env, cmd)
			}
			c.Envs[env][cmd] = params
		}
	}
	if c.Version == 0 {
		return nil, fmt.Errorf("version is missing")
	}
	return c, nil
}

// Parameters returns the parameters that the SAM CLI uses for cmd ("build",
// "deploy", ...; sam local commands are written local_start_api) in env: the
// env's global parameters overridden by the command's own.
func (c *SAMConfig) Parameters(env, cmd string) map[string]any {
	out := map[string]any{}
	for k, v := range c.Envs[env]["global"] {
		out[k] = v
	}
	for k, v := range c.Envs[env][cmd] {
		out[k] = v
	}
	return out
}

// ParameterOverrides returns the template parameter values set by
// parameter_overrides for cmd in env, written either as one string
// ("A=1 B=\"two words\"") or as a list of "Key=Value" strings.
func (c *SAMConfig) ParameterOverrides(env, cmd string) (map[string]string, error) {
	var items []string
	switch v := c.Parameters(env, cmd)["parameter_overrides"].(type) {
	case nil:
		return map[string]string{}, nil
	case string:
		var err error
		if items, err = splitOverrides(v); err != nil {
			return nil, fmt.Errorf("samtemplate: %s.%s parameter_overrides: %w", env, cmd, err)
		}
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("samtemplate: %s.%s parameter_overrides: %v is not a string", env, cmd, e)
			}
			items = append(items, s)
		}
	default:
		return nil, fmt.Errorf("samtemplate: %s.%s parameter_overrides: unsupported value %v", env, cmd, v)
	}
	out := map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("samtemplate: %s.%s parameter_overrides: %q is not Key=Value", env, cmd, it)
		}
		out[k] = v
	}
	return out, nil
}

// splitOverrides splits "A=1 B=\"two words\"" into [A=1 B=two words].
func splitOverrides(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inQuote, started := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQuote = !inQuote
			started = true
		case c == '\\' && inQuote && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case (c == ' ' || c == '\t' || c == '\n') && !inQuote:
			if started {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(c)
			started = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if started {
		out = append(out, cur.String())
	}
	return out, nil
}
