package deploytest

import (
	"maps"
	"slices"
	"testing"
)

// samCLIOptions are the samconfig.toml parameters of the SAM CLI commands
// samconfig.toml configures: each command's click options (the flag's name
// without "--", dashes as underscores), from SAM CLI 1.164.0's
// samcli/commands/{build,deploy,sync}/command.py, validate/validate.py and
// the shared options they use (samcli/commands/_utils/options.py,
// samcli/cli/main.py). The value says whether the option is a flag (a TOML
// boolean) or takes a value. A parameter the command does not have is
// ignored by the SAM CLI without a word, so a misspelt key silently does
// nothing. Add a command or option here from SAM CLI's source when
// samconfig.toml starts using it.
var samCLIOptions = map[string]map[string]bool{
	"build": {
		"base_dir": false, "build_dir": false, "build_image": false, "build_in_source": true,
		"cache_dir": false, "cached": true, "container_env_var": false, "container_env_var_file": false,
		"debug": true, "docker_network": false, "exclude": false, "hook_name": false, "manifest": false,
		"mount_symlinks": true, "mount_with": false, "parallel": true, "parameter_overrides": false,
		"profile": false, "region": false, "save_params": true, "skip_pull_image": true,
		"template_file": false, "use_buildkit": true, "use_container": true,
	},
	"validate": {
		"debug": true, "lint": true, "profile": false, "region": false, "save_params": true, "template_file": false,
	},
	"deploy": {
		"capabilities": false, "confirm_changeset": true, "debug": true, "disable_rollback": true,
		"fail_on_empty_changeset": true, "force_upload": true, "guided": true, "image_repositories": false,
		"image_repository": false, "kms_key_id": false, "max_wait_duration": false, "metadata": false,
		"no_execute_changeset": true, "no_progressbar": true, "notification_arns": false, "on_failure": false,
		"parameter_overrides": false, "profile": false, "region": false, "resolve_image_repos": true,
		"resolve_s3": true, "role_arn": false, "s3_bucket": false, "s3_prefix": false, "save_params": true,
		"signing_profiles": false, "stack_name": false, "tags": false, "template_file": false, "use_json": true,
	},
	"sync": {
		"base_dir": false, "build_image": false, "build_in_source": true, "capabilities": false, "code": true,
		"container_env_var_file": false, "debug": true, "dependency_layer": true, "image_repositories": false,
		"image_repository": false, "kms_key_id": false, "metadata": false, "notification_arns": false,
		"parameter_overrides": false, "profile": false, "region": false, "resource": false, "resource_id": false,
		"role_arn": false, "save_params": true, "skip_deploy_sync": true, "stack_name": false, "tags": false,
		"template_file": false, "use_container": true, "watch": true, "watch_exclude": false,
	},
}

// TestSAMConfigKeysAreSAMCLIOptions holds every parameter of samconfig.toml
// to an option of its command (SAM CLI's configuration file documentation:
// a section [env.command.parameters] takes the command's options, and
// [env.global.parameters] those shared by the commands), flags to booleans.
func TestSAMConfigKeysAreSAMCLIOptions(t *testing.T) {
	c := samconfig(t)
	for _, env := range sortedKeys(c.Envs) {
		for _, cmd := range sortedKeys(c.Envs[env]) {
			for _, key := range sortedKeys(c.Envs[env][cmd]) {
				flag, known := samCLIOption(cmd, key)
				if !known {
					t.Errorf("[%s.%s.parameters] %s: not an option of %s in SAM CLI 1.164.0 (known: %v)", env, cmd, key, commandsOrGlobal(cmd), samCLIKeys(cmd))
					continue
				}
				if _, isBool := c.Envs[env][cmd][key].(bool); isBool != flag {
					t.Errorf("[%s.%s.parameters] %s = %v: flag %v, want a %s", env, cmd, key, c.Envs[env][cmd][key], flag, map[bool]string{true: "boolean", false: "value (not a boolean)"}[flag])
				}
			}
		}
	}
}

// samCLIOption reports whether key is an option of cmd ("global": of any
// configured command), and whether it is a flag.
func samCLIOption(cmd, key string) (flag, known bool) {
	if cmd != "global" {
		flag, known = samCLIOptions[cmd][key]
		return flag, known
	}
	for _, opts := range samCLIOptions {
		if f, ok := opts[key]; ok {
			return f, true
		}
	}
	return false, false
}

func commandsOrGlobal(cmd string) string {
	if cmd == "global" {
		return "any configured command"
	}
	return "sam " + cmd
}

func samCLIKeys(cmd string) []string {
	if cmd != "global" {
		return slices.Sorted(maps.Keys(samCLIOptions[cmd]))
	}
	return slices.Sorted(maps.Keys(samCLIOptions))
}
