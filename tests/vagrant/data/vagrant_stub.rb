# Loads the Vagrantfile against a recording stand-in for Vagrant's configuration API (no Vagrant, no VMs) and
# prints, as JSON, every setting and call it made, per machine and provider.
require "json"

class Recorder
  attr_reader :log

  def initialize(log, path)
    @log = log
    @path = path
  end

  def method_missing(name, *args, **kwargs, &block)
    key = name.to_s
    if key.end_with?("=")
      @log << { "path" => @path, "set" => key.chomp("="), "value" => args.first }
      return args.first
    end
    if block
      call_block(key, args, block)
    else
      @log << { "path" => @path, "call" => key, "args" => args, "kwargs" => kwargs.transform_keys(&:to_s) }
      Recorder.new(@log, "#{@path}.#{key}")
    end
  end

  def respond_to_missing?(*)
    true
  end

  private

  def call_block(key, args, block)
    case key
    when "define"
      block.call(Recorder.new(@log, "machine:#{args.first}"))
    when "provider"
      machine = @path.split(".").first
      override = Recorder.new(@log, "#{machine}.override:#{args.first}")
      block.arity == 2 ? block.call(Recorder.new(@log, "#{machine}.provider:#{args.first}"), override)
                       : block.call(Recorder.new(@log, "#{machine}.provider:#{args.first}"))
    else
      block.call(Recorder.new(@log, "#{@path}.#{key}"))
    end
  end
end

module Vagrant
  LOG = []

  def self.configure(version)
    raise "unexpected config version #{version}" unless version == "2"

    yield Recorder.new(LOG, "config")
  end
end

load ARGV.fetch(0)
puts JSON.generate(Vagrant::LOG)
