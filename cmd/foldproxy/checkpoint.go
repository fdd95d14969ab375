package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
)

// checkpointCommand lets a person see and remove the checkpoints sessions
// saved (checkpoint_save): foldproxy checkpoint list|show|delete.
type checkpointCommand struct {
	stdout, stderr io.Writer
}

const checkpointUsage = `Usage: foldproxy checkpoint <list|show|delete> [flags] [ID...]

  list        one line per checkpoint: id, created, principal, open branches, name
  show ID...  every field of the given checkpoints, as JSON
  delete ID...  remove the given checkpoints

Flags (before or after the IDs):
  --config FILE   the proxy's configuration (default state folder beside it)
  --state DIR     the state folder (default: .foldproxy beside the config)
  --json          list as JSON lines

list and show read a store a proxy left open (kill -9) after replaying its
log; delete needs the store to itself: stop the proxy first.
`

// Run implements command.
func (c *checkpointCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.stdout, checkpointUsage)
		if len(args) == 0 {
			return errors.New("a verb is required: list, show or delete")
		}
		return nil
	}
	verb := args[0]
	switch verb {
	case "list", "show", "delete":
	default:
		return fmt.Errorf("unknown verb %q: want list, show or delete", verb)
	}
	fs := flag.NewFlagSet("checkpoint "+verb, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	configPath := fs.String("config", "", "the proxy's configuration `FILE`")
	stateDir := fs.String("state", "", "the state folder `DIR`")
	asJSON := fs.Bool("json", false, "list as JSON lines")
	fs.Usage = func() { fmt.Fprint(c.stderr, checkpointUsage) }
	var ids []string
	for in := args[1:]; ; {
		if err := fs.Parse(in); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		in = fs.Args()[1:]
	}
	if verb != "list" && len(ids) == 0 {
		return fmt.Errorf("%s needs checkpoint ids (foldproxy checkpoint list shows them)", verb)
	}
	dir := *stateDir
	if dir == "" && *configPath != "" {
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return err
		}
		switch dir = cfg.Settings.StateDir; {
		case dir == "":
			dir = filepath.Join(cfg.Dir, ".foldproxy")
		case !filepath.IsAbs(dir):
			dir = filepath.Join(cfg.Dir, dir)
		}
	}
	if dir == "" {
		return errors.New("give --config or --state: where are the checkpoints?")
	}
	path := filepath.Join(dir, "badger")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("the state folder %s holds no store (%s): %w", dir, path, err)
	}
	var st *store.BadgerStore
	var err error
	if verb == "delete" {
		st, err = store.OpenBadger(path, nil)
	} else {
		st, _, err = store.OpenBadgerReader(path, nil)
	}
	if err != nil {
		return err
	}
	defer st.Close()

	switch verb {
	case "list":
		cs, err := fold.Checkpoints(ctx, st, "")
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(c.stdout)
			for _, ck := range cs {
				if err := enc.Encode(map[string]any{"id": ck.ID, "name": ck.Name, "principal": ck.Principal, "created": ck.Created, "open_branches": ck.OpenBranches(), "resumed": ck.Resumed}); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCREATED\tPRINCIPAL\tOPEN\tRESUMED\tNAME")
		for _, ck := range cs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", ck.ID, ck.Created.UTC().Format(time.RFC3339), ck.Principal, ck.OpenBranches(), ck.Resumed, oneLine(ck.Name, 60))
		}
		return tw.Flush()
	case "show":
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		for _, id := range ids {
			ck, err := fold.GetCheckpoint(ctx, st, id)
			if err != nil {
				return err
			}
			if err := enc.Encode(ck); err != nil {
				return err
			}
		}
		return nil
	default:
		var missing []string
		for _, id := range ids {
			if _, err := fold.GetCheckpoint(ctx, st, id); err != nil {
				missing = append(missing, id)
				continue
			}
			if err := st.DeleteRecord(ctx, fold.KindCheckpoint, id); err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, "deleted", id)
		}
		if len(missing) > 0 {
			return fmt.Errorf("no such checkpoint: %s", strings.Join(missing, ", "))
		}
		return nil
	}
}
